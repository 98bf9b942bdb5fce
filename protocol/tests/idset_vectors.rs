//! The test vectors of `protocol/FORMAT.md`, read out of that file, against the
//! reference implementation: hashes and probe starts/steps, whole tables byte for
//! byte, and tables a server must refuse, with their messages. A few vectors are also
//! copied here, so that changing the format needs a deliberate edit in two places.

use relcache_protocol::idset::{
    hash, start_and_step, validate, Builder, Header, TableMut, DELETED, EMPTY, HEADER_LEN, SLOT_LEN,
};

fn format_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/FORMAT.md");
    std::fs::read_to_string(path).expect("read protocol/FORMAT.md")
}

fn parse_u64(s: &str) -> u64 {
    match s {
        "u64::MAX" => u64::MAX,
        _ => match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
            None => s.parse().unwrap(),
        },
    }
}

fn unhex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len().is_multiple_of(2), "odd number of hex digits");
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

#[derive(Debug, Default)]
struct Vector {
    name: String,
    ids: Vec<u64>,
    seed: u64,
    reserve: usize,
    ops: Vec<String>,
    capacity: u32,
    /// The seed in the built table's header: `seed` unless the build had to move on.
    header_seed: Option<u64>,
    slots: Vec<(u64, u64)>,
    /// The exact bytes; empty when the block gives `slots` only (long tables).
    bytes: Vec<u8>,
}

/// The ```text blocks that start with `vector:`. A line that starts with a space
/// continues the value of the key before it.
fn vectors(md: &str) -> Vec<Vector> {
    let mut out = Vec::new();
    let mut lines = md.lines();
    while let Some(line) = lines.next() {
        if !line.starts_with("vector:") {
            continue;
        }
        let mut v = Vector {
            name: line["vector:".len()..].trim().to_string(),
            ..Default::default()
        };
        let mut hex = String::new();
        let mut fields: Vec<(&str, String)> = Vec::new();
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            let line = line.split('#').next().unwrap();
            match fields.last_mut() {
                Some(("hex", _)) => hex.push_str(line),
                Some((_, value)) if line.starts_with(' ') => {
                    value.push(' ');
                    value.push_str(line.trim());
                }
                _ => {
                    let (key, value) = line.split_once(':').expect("key: value");
                    fields.push((key, value.trim().to_string()));
                }
            }
        }
        for (key, value) in &fields {
            let value = value.as_str();
            let list = || value.split_whitespace().filter(|w| *w != "(none)");
            match *key {
                "ids" => v.ids = list().map(parse_u64).collect(),
                "seed" => v.seed = parse_u64(value),
                "reserve" => v.reserve = value.parse().unwrap(),
                "ops" => v.ops = list().map(str::to_string).collect(),
                "capacity" => v.capacity = value.parse().unwrap(),
                "header-seed" => v.header_seed = Some(parse_u64(value)),
                "slots" => {
                    v.slots = list()
                        .map(|w| {
                            let (id, slot) = w.split_once('@').unwrap();
                            (parse_u64(id), slot.parse().unwrap())
                        })
                        .collect();
                }
                "hex" => {}
                other => panic!("unknown key {other:?} in vector {}", v.name),
            }
        }
        v.bytes = unhex(&hex);
        out.push(v);
    }
    out
}

/// A ```text block that starts with `refusal:`: a table made from its description.
#[derive(Debug, Default)]
struct Refusal {
    name: String,
    seed: u64,
    capacity: u32,
    fill: u64,
    slots: Vec<(u64, u64)>,
    place: Vec<u64>,
    error: String,
}

/// An id list: words, `(none)`, or ranges `a..=b`.
fn id_list(value: &str) -> Vec<u64> {
    let mut ids = Vec::new();
    for w in value.split_whitespace().filter(|w| *w != "(none)") {
        match w.split_once("..=") {
            Some((a, b)) => ids.extend(parse_u64(a)..=parse_u64(b)),
            None => ids.push(parse_u64(w)),
        }
    }
    ids
}

fn refusals(md: &str) -> Vec<Refusal> {
    let mut out = Vec::new();
    let mut lines = md.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.strip_prefix("refusal:") else {
            continue;
        };
        let mut r = Refusal {
            name: name.trim().to_string(),
            ..Default::default()
        };
        for line in lines.by_ref().take_while(|l| !l.starts_with("```")) {
            let (key, value) = line.split_once(':').expect("key: value");
            let value = value.trim();
            match key {
                "seed" => r.seed = parse_u64(value),
                "capacity" => r.capacity = value.parse().unwrap(),
                "fill" => r.fill = parse_u64(value),
                "slots" => {
                    r.slots = value
                        .split_whitespace()
                        .map(|w| {
                            let (v, slot) = w.split_once('@').unwrap();
                            (parse_u64(v), slot.parse().unwrap())
                        })
                        .collect();
                }
                "place" => r.place = id_list(value),
                "error" => r.error = value.to_string(),
                other => panic!("unknown key {other:?} in refusal {}", r.name),
            }
        }
        out.push(r);
    }
    out
}

/// The slots of `id`'s whole probe sequence (FORMAT.md §4).
fn sequence(id: u64, seed: u64, capacity: u32) -> Vec<u64> {
    let (start, step) = start_and_step(hash(id, seed), capacity);
    let cap = u64::from(capacity);
    (0..cap)
        .map(|k| (u64::from(start) + k * u64::from(step)) % cap)
        .collect()
}

/// The bytes a refusal block describes.
fn refused_table(r: &Refusal) -> Vec<u8> {
    let mut slots = vec![r.fill; r.capacity as usize];
    for &(v, slot) in &r.slots {
        slots[slot as usize] = v;
    }
    for &id in &r.place {
        let seq = sequence(id, r.seed, r.capacity);
        let free = seq.into_iter().find(|&s| slots[s as usize] == EMPTY);
        slots[free.expect("an empty slot") as usize] = id;
    }
    let header = Header {
        version: 1,
        flags: 0,
        seed: r.seed,
        capacity: r.capacity,
        count: slots
            .iter()
            .filter(|&&v| v != EMPTY && v != DELETED)
            .count() as u32,
        deleted: slots.iter().filter(|&&v| v == DELETED).count() as u32,
    };
    let mut bytes = header.to_bytes().to_vec();
    for v in slots {
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    bytes
}

/// The checks of FORMAT.md §8 as they were before the probe bound: every id reachable
/// by a lookup walking to the first EMPTY slot, and all those lookups together
/// reading at most 64 slots per slot of capacity.
fn valid_before_the_bound(bytes: &[u8]) -> bool {
    let header = Header::parse(bytes).unwrap();
    let slot = |i: u64| {
        let off = HEADER_LEN + SLOT_LEN * i as usize;
        u64::from_le_bytes(bytes[off..off + SLOT_LEN].try_into().unwrap())
    };
    let mut reads = 0u64;
    for i in 0..u64::from(header.capacity) {
        let id = slot(i);
        if id == EMPTY || id == DELETED {
            continue;
        }
        let seq = sequence(id, header.seed, header.capacity);
        let Some(depth) = seq.iter().position(|&s| slot(s) == id || slot(s) == EMPTY) else {
            return false;
        };
        if seq[depth] != i {
            return false;
        }
        reads += depth as u64 + 1;
    }
    let empty = (0..u64::from(header.capacity)).any(|i| slot(i) == EMPTY);
    empty && reads <= 64 * u64::from(header.capacity)
}

#[test]
fn refusal_vectors_in_format_md() {
    let refusals = refusals(&format_md());
    let names: Vec<&str> = refusals.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["past-the-bound", "one-empty-slot"]);
    for r in &refusals {
        let bytes = refused_table(r);
        assert!(valid_before_the_bound(&bytes), "refusal {}", r.name);
        let err = validate(&bytes).expect_err(&r.name);
        assert_eq!(err.to_string(), r.error, "refusal {}", r.name);
    }
}

fn build(v: &Vector) -> Vec<u8> {
    let mut bytes = Builder::new().seed(v.seed).reserve(v.reserve).build(&v.ids);
    let mut table = TableMut::open(&mut bytes).unwrap();
    for op in &v.ops {
        let id = parse_u64(&op[1..]);
        match &op[..1] {
            "+" => assert_eq!(table.insert(id), Ok(true), "{op}"),
            "-" => assert!(table.remove(id), "{op}"),
            _ => panic!("bad op {op}"),
        }
    }
    bytes
}

#[test]
fn table_vectors_in_format_md() {
    let vectors = vectors(&format_md());
    let names: Vec<&str> = vectors.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "empty",
            "three",
            "markers",
            "collisions",
            "tombstones",
            "reserve",
            "reseed"
        ]
    );
    for v in &vectors {
        let bytes = build(v);
        if !v.bytes.is_empty() {
            assert_eq!(hex(&bytes), hex(&v.bytes), "vector {}", v.name);
        }
        let table = validate(&bytes).unwrap_or_else(|e| panic!("vector {}: {e}", v.name));
        assert_eq!(table.capacity(), v.capacity, "vector {}", v.name);
        let header_seed = v.header_seed.unwrap_or(v.seed);
        assert_eq!(table.seed(), header_seed, "vector {}", v.name);
        let placed: Vec<(u64, u64)> = bytes[32..]
            .chunks_exact(8)
            .enumerate()
            .map(|(slot, c)| (u64::from_le_bytes(c.try_into().unwrap()), slot as u64))
            .filter(|&(id, _)| id != EMPTY && id != DELETED)
            .collect();
        assert_eq!(placed, v.slots, "vector {}", v.name);
        for &(id, _) in &v.slots {
            assert!(table.contains(id));
        }
    }
}

#[test]
fn hash_vectors_in_format_md() {
    let md = format_md();
    let mut seen = 0;
    for line in md.lines().filter(|l| l.starts_with("hash:")) {
        let field = |name: &str| {
            let word = line
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")[..]));
            parse_u64(word.unwrap_or_else(|| panic!("{name} missing in {line}")))
        };
        let (id, seed, capacity) = (field("id"), field("seed"), field("capacity") as u32);
        let h = hash(id, seed);
        assert_eq!(h, field("h"), "{line}");
        let (start, step) = start_and_step(h, capacity);
        assert_eq!(
            (u64::from(start), u64::from(step)),
            (field("start"), field("step")),
            "{line}"
        );
        seen += 1;
    }
    assert!(seen >= 8, "only {seen} hash vectors found");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Copies of three vectors: a change to the format must update these too.
#[test]
fn pinned_vectors() {
    let empty = "895243494453 01 00 157c4a7fb979379e 02000000 00000000 00000000 00000000 \
                 0000000000000000 0000000000000000";
    let three = "895243494453 01 00 157c4a7fb979379e 05000000 03000000 00000000 00000000 \
                 0300000000000000 0000000000000000 0200000000000000 0000000000000000 \
                 0100000000000000";
    let markers = "895243494453 01 03 2a00000000000000 02000000 01000000 00000000 00000000 \
                   0000000000000000 0700000000000000";
    assert_eq!(Builder::new().build(&[]), unhex(empty));
    assert_eq!(Builder::new().build(&[1, 2, 3]), unhex(three));
    assert_eq!(
        Builder::new().seed(42).build(&[0, u64::MAX, 7]),
        unhex(markers)
    );

    let vectors = vectors(&format_md());
    let find = |name: &str| &vectors.iter().find(|v| v.name == name).unwrap().bytes;
    assert_eq!(*find("empty"), unhex(empty));
    assert_eq!(*find("three"), unhex(three));
    assert_eq!(*find("markers"), unhex(markers));
}
