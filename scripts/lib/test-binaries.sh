# Shared by the scripts that carry release test binaries to a machine without Rust.
# test_binary NAME: builds the release test binary of crates/kiln/tests/NAME.rs and prints its path.
test_binary() {
    cargo test --release -q -p kiln --test "$1" --no-run --message-format=json 2>/dev/null |
        python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])' | tail -1
}
