//! Redis glob patterns (KEYS, SCAN MATCH, CONFIG GET): `*`, `?`, `[abc]`, `[^a-z]`
//! and `\` escapes, on raw bytes, with the same corner cases as Redis's
//! `stringmatchlen` (an unclosed `[` matches up to the end of the pattern).

/// Whether `s` matches `pattern`; `nocase` folds ASCII case (CONFIG GET does).
pub fn matches(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    // Iterative matcher with single-star backtracking: O(len(p) * len(s)) worst case
    // and no recursion, so a hostile pattern cannot blow the stack.
    let (mut p, mut i) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    while i < s.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, i));
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, next)) = class(pattern, p, s[i], nocase) {
                        if ok {
                            p = next;
                            i += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if eq(pattern[p + 1], s[i]) {
                        p += 2;
                        i += 1;
                        continue;
                    }
                }
                c => {
                    if eq(c, s[i]) {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
            }
        }
        // Mismatch: let the last star absorb one more byte, or fail.
        match star {
            Some((sp, si)) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches byte `c` against the class starting at `pattern[start] == b'['`.
/// Returns (matched, index after the class).
fn class(pattern: &[u8], start: usize, c: u8, nocase: bool) -> Option<(bool, usize)> {
    let mut p = start + 1;
    let not = pattern.get(p) == Some(&b'^');
    if not {
        p += 1;
    }
    let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
    let c = fold(c);
    let mut hit = false;
    loop {
        match pattern.get(p) {
            None => break, // unclosed: Redis treats the end of pattern as the close
            Some(b']') => {
                p += 1;
                break;
            }
            Some(b'\\') if p + 1 < pattern.len() => {
                hit |= fold(pattern[p + 1]) == c;
                p += 2;
            }
            Some(&lo) if pattern.get(p + 1) == Some(&b'-') && p + 2 < pattern.len() => {
                let hi = pattern[p + 2];
                let (lo, hi) = (fold(lo.min(hi)), fold(lo.max(hi)));
                hit |= c >= lo && c <= hi;
                p += 3;
            }
            Some(&b) => {
                hit |= fold(b) == c;
                p += 1;
            }
        }
    }
    Some((hit != not, p))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_cases() {
        let m = |p: &str, s: &str| matches(p.as_bytes(), s.as_bytes(), false);
        assert!(m("*", ""));
        assert!(m("*", "anything"));
        assert!(m("h?llo", "hello"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("h[b-a]llo", "hallo"), "reversed range");
        assert!(m("user:\\*", "user:*"));
        assert!(!m("user:\\*", "user:x"));
        assert!(m("a*b*c", "axxbyyc"));
        assert!(!m("a*b*c", "axxbyy"));
        assert!(m("*.rs", "main.rs"));
        assert!(m("max*", "maxmemory-policy"));
        assert!(matches(b"MAX*", b"maxmemory", true));
        assert!(!matches(b"MAX*", b"maxmemory", false));
    }

    #[test]
    fn pathological_pattern_is_fast() {
        let s = vec![b'a'; 10_000];
        let p = b"a*a*a*a*a*a*a*a*a*b";
        assert!(!matches(p, &s, false));
    }
}
