//! `include/kiln.h` is generated: cbindgen prints the handles, constants and hand-written
//! functions of the crate, and the op table prints its op prototypes (cbindgen does not expand
//! macros) into the header's op section. This test regenerates it and fails when the checked-in
//! header differs from the code; `KILN_BLESS=1 cargo test -p kiln-c --test header` rewrites it.

use std::path::PathBuf;

const OPS_BEGIN: &str = "/* The op set (generated from the op table of src/ops.rs). */\n";
const CPP_END: &str = "#ifdef __cplusplus\n}  // extern \"C\"\n#endif  // __cplusplus\n";

fn generated_header() -> String {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header")
        .write(&mut out);
    let text = String::from_utf8(out).expect("the header is UTF-8");
    let ops: String = kiln_c::ops::op_declarations().iter().map(|d| format!("\n{}", d.to_c())).collect();
    let at = text.rfind(CPP_END).expect("cbindgen closes the extern \"C\" block (cpp_compat)");
    format!("{}{OPS_BEGIN}{ops}\n{}", &text[..at], &text[at..])
}

#[test]
fn the_header_is_generated_from_the_code() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include/kiln.h");
    let generated = generated_header();
    if std::env::var_os("KILN_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("writes include/kiln.h");
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "include/kiln.h differs from the code: run `KILN_BLESS=1 cargo test -p kiln-c --test header` and commit it"
    );
}

#[test]
fn every_op_of_the_table_is_declared_once_with_a_doc() {
    let decls = kiln_c::ops::op_declarations();
    let mut names: Vec<&str> = decls.iter().map(|d| d.name).collect();
    names.sort_unstable();
    let before = names.len();
    names.dedup();
    assert_eq!(before, names.len(), "an op is in the table twice");
    assert!(decls.len() > 150, "the table lost ops: {}", decls.len());
    for d in &decls {
        assert!(!d.docs.is_empty(), "{} has no doc comment", d.name);
        assert!(d.name.starts_with("kiln_"), "{}", d.name);
    }
}
