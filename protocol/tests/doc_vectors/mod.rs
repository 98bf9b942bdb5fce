//! Test vectors written in the format documents (SNAPSHOT.md, DUMP.md), read out
//! of them so the documents and the code cannot drift apart.

/// The bytes of the ```text block whose first line is `label`, as hex: comments
/// (`#` to the end of the line) and whitespace dropped.
pub fn vector(md: &str, label: &str) -> Vec<u8> {
    let mut lines = md.lines().skip_while(|l| l.trim() != label);
    assert!(
        lines.next().is_some(),
        "vector '{label}' not in the document"
    );
    let digits: String = lines
        .take_while(|l| !l.starts_with("```"))
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.chars().filter(|c| c.is_ascii_hexdigit()))
        .collect();
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
        .collect()
}
