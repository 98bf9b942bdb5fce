//! Exact emulation of the x87 80-bit `long double` Redis uses for INCRBYFLOAT on
//! x86-64: `strtold` parsing (as Redis's `string2ld` accepts it), correctly
//! rounded addition, and `%.17Lf` printing with trailing zeros trimmed.
//!
//! Values are `mant * 2^exp` with a 64-bit significand and exponents down to the
//! subnormal floor; all rounding is round-half-to-even on the exact value, done
//! with a small arbitrary-precision integer. Inputs are at most 5119 bytes (Redis
//! rejects longer ones), which bounds every computation here to well under a
//! millisecond.
//!
//! Arithmetic only, for INCRBYFLOAT (`cmd/strings.rs`): not a general float type
//! (no NaN, no operations beyond parse, add and print).

use std::cmp::Ordering;

/// Redis's `MAX_LONG_DOUBLE_CHARS`: longer strings are not floats.
const MAX_CHARS: usize = 5 * 1024;
/// Significand bits.
const PREC: i64 = 64;
/// Exponent of the lowest bit of the smallest subnormal (2^-16445).
const MIN_EXP: i64 = -16445;
/// Values must stay below 2^MAX_BITS.
const MAX_BITS: i64 = 16384;
/// Exponent clamp while parsing: far beyond any finite or nonzero result.
const EXP_CLAMP: i64 = 1_000_000;

/// An extended-precision value (never NaN: NaN is never accepted or stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ld {
    /// `(-1)^neg * mant * 2^exp`.
    Finite {
        neg: bool,
        mant: u64,
        exp: i64,
    },
    Inf {
        neg: bool,
    },
}

impl Ld {
    pub(crate) const ZERO: Ld = Ld::Finite {
        neg: false,
        mant: 0,
        exp: 0,
    };

    /// Parses like Redis's `string2ld`: the whole string must be one `strtold`
    /// number (decimal, hex with `p` exponent, `inf`/`infinity`), no leading
    /// space, no NaN, not overflowing and not underflowing to zero.
    pub(crate) fn parse(s: &[u8]) -> Option<Ld> {
        if s.is_empty() || s.len() >= MAX_CHARS {
            return None;
        }
        let (neg, body) = match s[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
            return Some(Ld::Inf { neg });
        }
        if body.len() > 1 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
            if let Some(v) = parse_hex(&body[2..], neg) {
                return Some(v);
            }
            // "0x" without hex digits: strtold reads just the "0" and the rest
            // is left over, which Redis rejects.
            return None;
        }
        parse_decimal(body, neg)
    }

    /// The sum, or `None` when it is infinite or NaN.
    pub(crate) fn add(self, other: Ld) -> Option<Ld> {
        let (
            Ld::Finite {
                neg: an,
                mant: am,
                exp: ae,
            },
            Ld::Finite {
                neg: bn,
                mant: bm,
                exp: be,
            },
        ) = (self, other)
        else {
            return None;
        };
        if am == 0 && bm == 0 {
            return Some(Ld::Finite {
                neg: an && bn,
                mant: 0,
                exp: 0,
            });
        }
        if am == 0 {
            return Some(other);
        }
        if bm == 0 {
            return Some(self);
        }
        let e = ae.min(be);
        let a = Big::from_u64(am).shl((ae - e) as u64);
        let b = Big::from_u64(bm).shl((be - e) as u64);
        let (sum, neg) = if an == bn {
            (a.add(&b), an)
        } else {
            match a.cmp(&b) {
                Ordering::Greater => (a.sub(&b), an),
                Ordering::Less => (b.sub(&a), bn),
                Ordering::Equal => return Some(Ld::ZERO),
            }
        };
        match round(&sum, e, false, neg) {
            v @ Ld::Finite { .. } => Some(v),
            Ld::Inf { .. } => None,
        }
    }

    /// `%.17Lf` with trailing zeros (and a bare point) removed, and "-0" as
    /// "0": Redis's human-friendly `ld2string`. Infinity prints as "inf".
    pub(crate) fn to_human(self) -> String {
        let (neg, mant, exp) = match self {
            Ld::Finite { neg, mant, exp } => (neg, mant, exp),
            Ld::Inf { neg } => return if neg { "-inf".into() } else { "inf".into() },
        };
        // The value times 10^17, rounded to an integer: its last 17 digits are
        // the decimals.
        let scaled = {
            let mut m = Big::from_u64(mant);
            m.mul_small(100_000_000); // 10^8
            m.mul_small(1_000_000_000); // 10^9
            if exp >= 0 {
                m.shl(exp as u64)
            } else {
                m.shr_round_even((-exp) as u64, false)
            }
        };
        let digits = scaled.to_decimal();
        let digits = format!("{digits:0>18}");
        let (int, frac) = digits.split_at(digits.len() - 17);
        let frac = frac.trim_end_matches('0');
        let mut out = String::with_capacity(digits.len() + 2);
        if neg {
            out.push('-');
        }
        out.push_str(int);
        if !frac.is_empty() {
            out.push('.');
            out.push_str(frac);
        }
        if out == "-0" {
            out.remove(0);
        }
        out
    }
}

/// `digits[.digits][(e|E)[sign]digits]`, at least one mantissa digit.
fn parse_decimal(s: &[u8], neg: bool) -> Option<Ld> {
    let mut i = 0;
    let mut big = Big::zero();
    let mut chunk = 0u32;
    let mut chunk_len = 0;
    let (mut digits, mut frac_digits, mut significant) = (0usize, 0i64, 0i64);
    let mut seen_point = false;
    while i < s.len() {
        let c = s[i];
        if c == b'.' && !seen_point {
            seen_point = true;
        } else if c.is_ascii_digit() {
            digits += 1;
            if seen_point {
                frac_digits += 1;
            }
            if significant > 0 || c != b'0' {
                significant += 1;
                chunk = chunk * 10 + (c - b'0') as u32;
                chunk_len += 1;
                if chunk_len == 9 {
                    big.mul_small(1_000_000_000);
                    big.add_small(chunk);
                    (chunk, chunk_len) = (0, 0);
                }
            }
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    if chunk_len > 0 {
        big.mul_small(10u32.pow(chunk_len));
        big.add_small(chunk);
    }
    let mut exp10 = 0i64;
    if i < s.len() && (s[i] | 0x20) == b'e' {
        exp10 = parse_exponent(&s[i + 1..])?;
        i = s.len();
    }
    if i != s.len() {
        return None;
    }
    if big.is_zero() {
        return Some(Ld::Finite {
            neg,
            mant: 0,
            exp: 0,
        });
    }
    // Significant digits were counted after leading zeros only; the value's
    // magnitude is 10^(mag-1) <= v < 10^mag.
    let e10 = exp10 - frac_digits;
    let mag = significant + e10;
    if mag > 4934 {
        return None; // overflow (ERANGE): not a valid float
    }
    if mag < -4960 {
        return None; // underflows to zero (ERANGE): not a valid float
    }
    let v = if e10 >= 0 {
        let mut n = big;
        for _ in 0..e10 / 9 {
            n.mul_small(1_000_000_000);
        }
        n.mul_small(10u32.pow((e10 % 9) as u32));
        round(&n, 0, false, neg)
    } else {
        let p = Big::pow10((-e10) as u32);
        // Scale so the quotient has 66 bits: 64 kept, a rounding bit, and one
        // spare; what is shifted out or left over only matters as "sticky".
        let k = p.bits() as i64 + PREC + 2 - big.bits() as i64;
        let (num, sticky_shift) = if k >= 0 {
            (big.shl(k as u64), false)
        } else {
            (big.shr((-k) as u64), big.any_below((-k) as u64))
        };
        let (q, r) = num.div_rem(&p);
        round(&q, -k, sticky_shift || !r.is_zero(), neg)
    };
    match v {
        Ld::Finite { mant: 0, .. } | Ld::Inf { .. } => None,
        v => Some(v),
    }
}

/// `hexdigits[.hexdigits][(p|P)[sign]digits]` after "0x".
fn parse_hex(s: &[u8], neg: bool) -> Option<Ld> {
    let mut i = 0;
    let mut big = Big::zero();
    let (mut digits, mut frac_digits) = (0usize, 0i64);
    let mut seen_point = false;
    while i < s.len() {
        let c = s[i];
        if c == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            digits += 1;
            if seen_point {
                frac_digits += 1;
            }
            big.mul_small(16);
            big.add_small(d);
        } else {
            break;
        }
        i += 1;
    }
    if digits == 0 {
        return None;
    }
    let mut exp2 = 0i64;
    if i < s.len() && (s[i] | 0x20) == b'p' {
        exp2 = parse_exponent(&s[i + 1..])?;
        i = s.len();
    }
    if i != s.len() {
        return None;
    }
    if big.is_zero() {
        return Some(Ld::Finite {
            neg,
            mant: 0,
            exp: 0,
        });
    }
    match round(&big, exp2 - 4 * frac_digits, false, neg) {
        Ld::Finite { mant: 0, .. } | Ld::Inf { .. } => None,
        v => Some(v),
    }
}

/// `[sign]digits` to the end of the string, clamped far beyond any exponent
/// that could give a finite nonzero value.
fn parse_exponent(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut e = 0i64;
    for &d in digits {
        e = (e * 10 + (d - b'0') as i64).min(EXP_CLAMP);
    }
    Some(if neg { -e } else { e })
}

/// Rounds `n * 2^scale` (plus a nonzero tail below it when `sticky`) to the
/// nearest representable value, ties to even.
fn round(n: &Big, scale: i64, sticky: bool, neg: bool) -> Ld {
    let bits = n.bits() as i64;
    if bits == 0 {
        return Ld::Finite {
            neg,
            mant: 0,
            exp: 0,
        };
    }
    // Keep the top 64 bits, or fewer where the value is subnormal.
    let cut = (bits - PREC).max(MIN_EXP - scale);
    let (mant, exp) = if cut <= 0 {
        (n.shl((-cut) as u64).low_u64(), scale + cut)
    } else {
        let kept = n.shr_round_even(cut as u64, sticky);
        if kept.bits() as i64 > PREC {
            // Rounded up to 2^64.
            (1u64 << 63, scale + cut + 1)
        } else {
            (kept.low_u64(), scale + cut)
        }
    };
    if mant != 0 && (64 - mant.leading_zeros() as i64) + exp > MAX_BITS {
        return Ld::Inf { neg };
    }
    Ld::Finite { neg, mant, exp }
}

/// A little-endian unsigned big integer, just enough for the conversions.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Big(Vec<u32>);

impl Big {
    fn zero() -> Big {
        Big(Vec::new())
    }

    fn from_u64(v: u64) -> Big {
        let mut b = Big(vec![v as u32, (v >> 32) as u32]);
        b.trim();
        b
    }

    fn pow10(n: u32) -> Big {
        let mut b = Big::from_u64(1);
        for _ in 0..n / 9 {
            b.mul_small(1_000_000_000);
        }
        b.mul_small(10u32.pow(n % 9));
        b
    }

    fn trim(&mut self) {
        while self.0.last() == Some(&0) {
            self.0.pop();
        }
    }

    fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    fn bits(&self) -> u64 {
        match self.0.last() {
            None => 0,
            Some(&top) => self.0.len() as u64 * 32 - top.leading_zeros() as u64,
        }
    }

    fn bit(&self, i: u64) -> bool {
        self.0
            .get((i / 32) as usize)
            .is_some_and(|w| w >> (i % 32) & 1 == 1)
    }

    /// Whether any bit below position `i` is set.
    fn any_below(&self, i: u64) -> bool {
        let (whole, part) = ((i / 32) as usize, i % 32);
        self.0.iter().take(whole).any(|&w| w != 0)
            || (part > 0
                && self
                    .0
                    .get(whole)
                    .is_some_and(|&w| w & ((1u32 << part) - 1) != 0))
    }

    fn low_u64(&self) -> u64 {
        let lo = self.0.first().copied().unwrap_or(0) as u64;
        let hi = self.0.get(1).copied().unwrap_or(0) as u64;
        lo | hi << 32
    }

    fn mul_small(&mut self, m: u32) {
        let mut carry = 0u64;
        for w in &mut self.0 {
            let v = *w as u64 * m as u64 + carry;
            *w = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
        self.trim();
    }

    fn add_small(&mut self, a: u32) {
        let mut carry = a as u64;
        for w in &mut self.0 {
            if carry == 0 {
                return;
            }
            let v = *w as u64 + carry;
            *w = v as u32;
            carry = v >> 32;
        }
        if carry != 0 {
            self.0.push(carry as u32);
        }
    }

    /// Divides in place by `d`, returning the remainder.
    fn div_small(&mut self, d: u32) -> u32 {
        let mut rem = 0u64;
        for w in self.0.iter_mut().rev() {
            let cur = rem << 32 | *w as u64;
            *w = (cur / d as u64) as u32;
            rem = cur % d as u64;
        }
        self.trim();
        rem as u32
    }

    fn shl(&self, n: u64) -> Big {
        if self.is_zero() {
            return Big::zero();
        }
        let (whole, part) = ((n / 32) as usize, (n % 32) as u32);
        let mut out = vec![0u32; whole];
        out.reserve(self.0.len() + 1);
        if part == 0 {
            out.extend_from_slice(&self.0);
        } else {
            let mut carry = 0u32;
            for &w in &self.0 {
                out.push(w << part | carry);
                carry = w >> (32 - part);
            }
            out.push(carry);
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    fn shr(&self, n: u64) -> Big {
        let (whole, part) = ((n / 32) as usize, (n % 32) as u32);
        if whole >= self.0.len() {
            return Big::zero();
        }
        let src = &self.0[whole..];
        let mut out = Vec::with_capacity(src.len());
        for (i, &w) in src.iter().enumerate() {
            let hi = if part == 0 {
                0
            } else {
                src.get(i + 1).map_or(0, |&h| h << (32 - part))
            };
            out.push(if part == 0 { w } else { w >> part | hi });
        }
        let mut b = Big(out);
        b.trim();
        b
    }

    /// `self >> n`, rounded half to even on the exact value (`sticky`: there is
    /// a nonzero tail below `self`'s lowest bit).
    fn shr_round_even(&self, n: u64, sticky: bool) -> Big {
        if n == 0 {
            return self.clone();
        }
        let mut q = self.shr(n);
        let half = self.bit(n - 1);
        let below = sticky || self.any_below(n - 1);
        if half && (below || q.bit(0)) {
            q.add_small(1);
        }
        q
    }

    fn add(&self, other: &Big) -> Big {
        let (long, short) = if self.0.len() >= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        let mut out = Vec::with_capacity(long.0.len() + 1);
        let mut carry = 0u64;
        for (i, &w) in long.0.iter().enumerate() {
            let v = w as u64 + short.0.get(i).copied().unwrap_or(0) as u64 + carry;
            out.push(v as u32);
            carry = v >> 32;
        }
        if carry != 0 {
            out.push(carry as u32);
        }
        Big(out)
    }

    /// `self - other`; `self >= other`.
    fn sub(&self, other: &Big) -> Big {
        let mut out = self.clone();
        out.sub_assign(other);
        out
    }

    fn sub_assign(&mut self, other: &Big) {
        let mut borrow = 0i64;
        for (i, w) in self.0.iter_mut().enumerate() {
            let v = *w as i64 - other.0.get(i).copied().unwrap_or(0) as i64 - borrow;
            (*w, borrow) = if v < 0 {
                ((v + (1 << 32)) as u32, 1)
            } else {
                (v as u32, 0)
            };
        }
        debug_assert_eq!(borrow, 0, "subtraction underflow");
        self.trim();
    }

    /// Quotient and remainder. Shift-and-subtract: the callers' quotients
    /// have about 66 bits, so this takes that many steps.
    fn div_rem(&self, d: &Big) -> (Big, Big) {
        let mut r = self.clone();
        let mut q = Big::zero();
        if self.cmp(d) == Ordering::Less {
            return (q, r);
        }
        let top = self.bits() - d.bits();
        q.0 = vec![0; (top / 32 + 1) as usize];
        for i in (0..=top).rev() {
            let t = d.shl(i);
            if r.cmp(&t) != Ordering::Less {
                r.sub_assign(&t);
                q.0[(i / 32) as usize] |= 1 << (i % 32);
            }
        }
        q.trim();
        (q, r)
    }

    fn cmp(&self, other: &Big) -> Ordering {
        self.0
            .len()
            .cmp(&other.0.len())
            .then_with(|| self.0.iter().rev().cmp(other.0.iter().rev()))
    }

    fn to_decimal(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut n = self.clone();
        let mut groups = Vec::new();
        while !n.is_zero() {
            groups.push(n.div_small(1_000_000_000));
        }
        let mut out = groups.pop().map(|g| g.to_string()).unwrap_or_default();
        for g in groups.iter().rev() {
            out.push_str(&format!("{g:09}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(from: &str, by: &str) -> Option<String> {
        let a = Ld::parse(from.as_bytes())?;
        let b = Ld::parse(by.as_bytes())?;
        a.add(b).map(Ld::to_human)
    }

    fn human(s: &str) -> Option<String> {
        Ld::parse(s.as_bytes()).map(Ld::to_human)
    }

    #[test]
    fn big_integer_basics() {
        let n = Big::pow10(30);
        assert_eq!(n.to_decimal(), format!("1{}", "0".repeat(30)));
        let (q, r) = n.div_rem(&Big::from_u64(7));
        assert_eq!(q.to_decimal(), "142857142857142857142857142857");
        assert_eq!(r.to_decimal(), "1");
        assert_eq!(Big::from_u64(5).shr_round_even(1, false).to_decimal(), "2"); // 2.5 -> 2
        assert_eq!(Big::from_u64(7).shr_round_even(1, false).to_decimal(), "4"); // 3.5 -> 4
        assert_eq!(Big::from_u64(5).shr_round_even(1, true).to_decimal(), "3"); // 2.5+ -> 3
        assert_eq!(Big::from_u64(u64::MAX).shl(70).shr(70).low_u64(), u64::MAX);
        assert!(Big::from_u64(0b1000).any_below(4) && !Big::from_u64(0b1000).any_below(3));
    }

    #[test]
    fn formats_like_redis() {
        // Every expected string below is what Redis 7 on x86-64 replied.
        assert_eq!(incr("10.50", "0.1").as_deref(), Some("10.6"));
        assert_eq!(incr("5.0e3", "0").as_deref(), Some("5000"));
        assert_eq!(incr("0", "3.0").as_deref(), Some("3"));
        assert_eq!(
            incr("1000", "0.1").as_deref(),
            Some("1000.09999999999999998")
        );
        assert_eq!(
            incr("1000.09999999999999998", "0.1").as_deref(),
            Some("1000.19999999999999996")
        );
        assert_eq!(
            incr("123456789.123", "0.001").as_deref(),
            Some("123456789.12399999999615829")
        );
        assert_eq!(incr("0.1", "0.1").as_deref(), Some("0.2"));
        assert_eq!(incr("0.2", "0.1").as_deref(), Some("0.3"));
        assert_eq!(incr("16", "-1e-20").as_deref(), Some("16"));
        assert_eq!(incr("0", "-1.5").as_deref(), Some("-1.5"));
        for (input, out) in [
            ("0.000003814697265625", "0.00000381469726562"), // a tie: to even
            ("0.000011444091796875", "0.00001144409179688"), // a tie: to even
            ("0.000001234", "0.000001234"),
            ("1e-17", "0.00000000000000001"),
            ("1e-18", "0"),
            ("-1e-18", "0"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("0x10", "16"),
            ("0x.8", "0.5"),
            ("0x1p-1", "0.5"),
            ("0X1P+2", "4"),
            ("0x1.8p1", "3"),
            ("1e+5", "100000"),
            ("1E5", "100000"),
            ("1.5e-3", "0.0015"),
            ("00012.5000", "12.5"),
            ("123.456e-2", "1.23456"),
            ("99999999999999999999.5", "100000000000000000000"),
            ("0.1e1", "1"),
            ("-9.999999999999999999", "-10"),
            ("9.99999999999999999999", "10"),
            ("18446744073709551615", "18446744073709551615"),
            ("18446744073709551617", "18446744073709551616"),
            ("36893488147419103231", "36893488147419103232"),
            (
                "123456789012345678901234567890",
                "123456789012345678899921813504",
            ),
            ("1.2345678901234567", "1.2345678901234567"),
            ("+1.5", "1.5"),
            (".5", "0.5"),
            ("5.", "5"),
            ("1e-4940", "0"),
            ("3e-4951", "0"),
        ] {
            assert_eq!(human(input).as_deref(), Some(out), "{input}");
        }
    }

    #[test]
    fn huge_values_print_every_digit() {
        let near_max = "1.18973149535723176502e+4932";
        let s = human(near_max).unwrap();
        assert!(s.starts_with("11897314953572317650212638530309702051690633222946242004403237338917370055229707226164102903365288828535456978074955773144274431536702884341981255738537436786735932007069732632019159182829615243655295"));
        assert_eq!(s.len(), 4933);
        let s = human("0x1p16383").unwrap();
        assert!(s.starts_with("59486574767861588254287966331400356538172234354825511873633741061663067909024184345224429773630601995755771874241965462944883369065434371313726234917078250304043581718300244876107162580976572342297617"));
        assert_eq!(
            incr("0.3", "1e308").as_deref(),
            Some("99999999999999999996685879655845645660560099847415567207797047994921734868838061872100126921888539320446747225054013223152134749593960583597420814430196418767959100019603190778663109604507106667939153395788938914560543563061268364901618630217086589253444881623791300855757318142424510452728255046343928578048")
        );
        // Past f64's range, still finite in long double.
        let twice = incr("99999999999999999996685879655845645660560099847415567207797047994921734868838061872100126921888539320446747225054013223152134749593960583597420814430196418767959100019603190778663109604507106667939153395788938914560543563061268364901618630217086589253444881623791300855757318142424510452728255046343928578048", "1e308");
        assert_eq!(twice.as_deref(), Some("199999999999999999993371759311691291321120199694831134415594095989843469737676123744200253843777078640893494450108026446304269499187921167194841628860392837535918200039206381557326219209014213335878306791577877829121087126122536729803237260434173178506889763247582601711514636284849020905456510092687857156096"));
    }

    #[test]
    fn rejects_what_string2ld_rejects() {
        for bad in [
            "",
            " 1",
            "1 ",
            "abc",
            "1e",
            "1e+",
            "e5",
            ".",
            "-",
            "+",
            "0x",
            "0x.",
            "0xg",
            "0x1p",
            "nan",
            "NaN",
            "-nan",
            "nan(1)",
            "infinit",
            "1.5\0",
            "\x001",
            "1e5000",
            "1.19e4932",
            "0x1p16384",
            "1.8e-4951",
            "1e-5000",
            "1..5",
            "1.5.",
            "--1",
            "+-1",
        ] {
            assert_eq!(Ld::parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(
            Ld::parse(format!("1{}", "0".repeat(5119)).as_bytes()),
            None,
            "too long"
        );
        assert!(Ld::parse(format!("0.{}1", "0".repeat(5000)).as_bytes()).is_none()); // underflow
        assert!(Ld::parse(format!("0.{}1", "0".repeat(4900)).as_bytes()).is_some());
        assert!(
            Ld::parse(b"0e-99999999999999999999999").is_some(),
            "exact zero"
        );
    }

    #[test]
    fn infinities_parse_but_never_add() {
        assert_eq!(Ld::parse(b"inf"), Some(Ld::Inf { neg: false }));
        assert_eq!(Ld::parse(b"-INFINITY"), Some(Ld::Inf { neg: true }));
        let one = Ld::parse(b"1").unwrap();
        assert_eq!(one.add(Ld::Inf { neg: false }), None);
        let max = Ld::parse(b"1.18973149535723176502e+4932").unwrap();
        assert_eq!(max.add(max), None, "overflow");
        assert_eq!(
            max.add(Ld::parse(b"-1.18973149535723176502e+4932").unwrap()),
            Some(Ld::ZERO)
        );
    }

    #[test]
    fn subnormals_round_trip() {
        let tiny = Ld::parse(b"3.6e-4951").unwrap();
        assert_eq!(
            tiny,
            Ld::Finite {
                neg: false,
                mant: 1,
                exp: MIN_EXP
            }
        );
        assert_eq!(
            tiny.add(tiny),
            Some(Ld::Finite {
                neg: false,
                mant: 2,
                exp: MIN_EXP
            })
        );
        assert_eq!(tiny.to_human(), "0");
    }
}
