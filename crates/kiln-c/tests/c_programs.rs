//! The C API from C: builds the C test program, the examples of `examples/c/` and a C++ use of
//! the header with the system compilers against `include/kiln.h` and the library cargo built,
//! runs them, and runs a create/compile/call/free stress program under valgrind.

use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The folder holding the `libkiln_c.so` cargo built for this test run: `deps/`, beside the test
/// binaries (`cargo build` copies it one folder up, where it may be older).
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("deps/");
    assert!(deps.join("libkiln_c.so").exists(), "libkiln_c.so was not built in {}", deps.display());
    deps.to_path_buf()
}

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Compiles `sources` into an executable in a temporary folder, linked to the shared library.
fn build(compiler: &str, flags: &[&str], sources: &[PathBuf], name: &str) -> PathBuf {
    let lib = library_dir();
    let out = std::env::temp_dir().join(format!("kiln-c-{}-{name}", std::process::id()));
    let mut cmd = Command::new(compiler);
    cmd.args(flags)
        .arg("-I")
        .arg(crate_dir().join("include"))
        .args(sources)
        .arg("-o")
        .arg(&out)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lkiln_c", "-lm"]);
    let o = cmd.output().expect("runs the compiler");
    assert!(o.status.success(), "{compiler} failed on {sources:?}:\n{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// Runs a built program with the CPU as default device; returns its standard output.
fn run(program: &Path, args: &[&str], wrapper: &[&str]) -> String {
    let (first, rest) = match wrapper.split_first() {
        Some((w, rest)) => (w.to_string(), rest.iter().map(|s| s.to_string()).chain([program.display().to_string()]).collect()),
        None => (program.display().to_string(), Vec::new()),
    };
    // cargo's LD_LIBRARY_PATH names the profile folder, whose copy of the library may be older.
    let search = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let o = Command::new(first)
        .args(rest)
        .args(args)
        .env("LD_LIBRARY_PATH", format!("{}:{search}", library_dir().display()))
        .env("KILN_DEFAULT_DEVICE", "cpu")
        .output()
        .expect("runs the program");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{} failed ({}):\n{stdout}\n{}",
        program.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

const C99: &[&str] = &["-std=c99", "-D_POSIX_C_SOURCE=199309L", "-Wall", "-Wextra", "-Werror", "-pedantic"];

#[test]
fn the_c_test_program_passes() {
    let exe = build("cc", C99, &[crate_dir().join("tests/c/api_test.c")], "api_test");
    let tmp = std::env::temp_dir();
    let out = run(&exe, &[tmp.to_str().expect("a UTF-8 temp dir")], &[]);
    print!("{out}");
    assert!(out.contains(" passed, 0 failed"), "{out}");
}

#[test]
fn the_examples_build_and_run() {
    let examples = crate_dir().join("../../examples/c");
    let gelu = build("cc", C99, &[examples.join("gelu_compile.c")], "gelu_compile");
    let out = run(&gelu, &[], &[]);
    assert!(out.contains("gelu: 5 kernels eager -> 1 compiled"), "{out}");
    assert!(out.contains("traces after two shapes (shapeless): 1"), "{out}");
    assert!(out.contains("erf"), "the report shows the fused kernel: {out}");
    let train = build("cc", C99, &[examples.join("train_step.c")], "train_step");
    let out = run(&train, &[], &[]);
    assert!(out.contains("step  99"), "{out}");
}

#[test]
fn the_header_compiles_as_cpp() {
    if !have("c++") {
        println!("skipped: no C++ compiler (c++) to check the header with");
        return;
    }
    let src = std::env::temp_dir().join(format!("kiln-c-{}-header.cpp", std::process::id()));
    std::fs::write(
        &src,
        "#include \"kiln.h\"\n#include <cstdio>\nint main() {\n  kiln_array a = kiln_array_new();\n  \
         if (kiln_array_new_float32(&a, 2.0f) != 0) return 1;\n  float v = 0;\n  \
         int rc = kiln_array_item_float32(&v, a);\n  kiln_array_free(a);\n  std::printf(\"%g\\n\", v);\n  \
         return rc != 0 || v != 2.0f;\n}\n",
    )
    .expect("writes the C++ source");
    let exe = build("c++", &["-std=c++11", "-Wall", "-Werror"], &[src], "header_cpp");
    assert_eq!(run(&exe, &[], &[]).trim(), "2");
}

#[test]
fn create_compile_call_free_cycles_are_clean_under_valgrind() {
    if !have("valgrind") {
        println!("skipped: valgrind is not installed (apt-get install valgrind; scripts/test installs it)");
        return;
    }
    let exe = build("cc", C99, &[crate_dir().join("tests/c/stress.c")], "stress");
    let wrapper = ["valgrind", "--error-exitcode=99", "--leak-check=full", "--errors-for-leak-kinds=definite", "--show-possibly-lost=no", "-q"];
    // Native kernels are built by a C compiler in the background; valgrind checks kiln's own code.
    std::env::set_var("KILN_NATIVE", "0");
    let out = run(&exe, &[], &wrapper);
    assert!(out.contains("stress: 40 cycles"), "{out}");
}
