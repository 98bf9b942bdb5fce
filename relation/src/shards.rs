//! The shard map: which MySQL database on which host holds a user's rows.
//!
//! Users are spread over `N` **logical shards** by a fixed hash of their id. Each
//! logical shard is one MySQL database (`relcache_s17`), and many of them share a
//! host, so that growing the fleet means moving whole databases to a new host and
//! editing one line of the map — never rehashing users. `N` is therefore chosen large
//! up front (thousands) and never changed.
//!
//! The map is a small text file:
//!
//! ```text
//! # logical shards are numbered 0..N-1; a user's shard is splitmix64(user_id) % N
//! shards 8
//! 0-3 mysql://root@127.0.0.1:3306 relcache_s{shard}
//! 4-7 mysql://root@10.0.0.2:3306 relcache_s{shard}
//! ```
//!
//! One `shards N` line, then lines of `RANGE URL DATABASE`: a range (`0-3`, or one
//! shard `5`), a `mysql://` URL naming a host (and credentials, and `mysql_async`
//! URL parameters) but no database, and a database name in which `{shard}` stands for
//! the shard number. Every shard must be covered exactly once. `#` starts a comment.
//!
//! This module only parses and answers lookups; it opens no connections (that is
//! [`Store`](super::store::Store)'s job, one pool per distinct host URL).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// The most logical shards a map may declare: far more than any fleet needs, small
/// enough that a typo (`shards 80000000`) is caught rather than allocated.
pub const MAX_SHARDS: u32 = 1 << 20;

/// The longest database name MySQL accepts.
const MAX_DATABASE_LEN: usize = 64;

/// The splitmix64 finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom
/// number generators", 2014): a fixed, well-mixed bijection on `u64`.
///
/// This decides which shard holds a user's rows, so it is part of the storage
/// format: it must give the same answer in every process, language and release.
/// That rules out `std`'s and `ahash`'s randomly seeded hashers. The constants are the
/// published ones; the test vectors below pin them.
///
/// ```
/// use relcache_relation::shards::splitmix64;
/// assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
/// ```
pub const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A MySQL server that holds some logical shards.
#[derive(Clone, PartialEq, Eq)]
pub struct Host {
    url: String,
    label: String,
}

impl Host {
    fn parse(url: &str) -> Result<Host, String> {
        let opts = mysql_async::Opts::from_url(url).map_err(|e| format!("bad URL: {e}"))?;
        if opts.db_name().is_some() {
            return Err("the URL must not name a database: the DATABASE column does".into());
        }
        let label = format!("{}:{}", opts.ip_or_hostname(), opts.tcp_port());
        Ok(Host {
            url: url.to_string(),
            label,
        })
    }

    /// The connection URL, credentials included: for opening connections only.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `host:port`, safe to log: errors name hosts by this, never by the URL, which
    /// may carry a password.
    pub fn label(&self) -> &str {
        &self.label
    }
}

impl fmt::Debug for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the URL: it may hold a password.
        f.debug_tuple("Host").field(&self.label).finish()
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Shard {
    host: usize,
    database: String,
}

/// Logical shard → (host, database). Cheap to clone; immutable once built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMap {
    hosts: Vec<Host>,
    shards: Vec<Shard>,
}

/// Why a shard map was refused.
#[derive(Debug, thiserror::Error)]
pub enum ShardMapError {
    /// A line is malformed or contradicts an earlier one.
    #[error("line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// There is no `shards N` line.
    #[error("no `shards N` line: the number of logical shards must be declared")]
    MissingCount,
    /// Some shards are assigned to no host.
    #[error("shards {0} are assigned to no host")]
    Unassigned(String),
    /// A map built in code ([`ShardMap::single_host`]) is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The file could not be read.
    #[error("cannot read shard map {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl ShardMap {
    /// Parses the text format described in the [module docs](self).
    ///
    /// # Errors
    ///
    /// [`ShardMapError`] naming the line and the problem: a missing or repeated
    /// `shards` line, a range out of `0..N`, ranges that overlap, a bad URL, an invalid
    /// database name, two shards sharing a database on one host, or shards left
    /// unassigned (all gaps listed).
    pub fn parse(text: &str) -> Result<ShardMap, ShardMapError> {
        let mut count: Option<u32> = None;
        let mut assigned: Vec<Option<(Shard, usize)>> = Vec::new();
        let mut hosts: Vec<Host> = Vec::new();
        let mut host_index: HashMap<String, usize> = HashMap::new();
        let mut databases: HashSet<(usize, String)> = HashSet::new();

        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |reason: String| ShardMapError::Line { line, reason };
            let content = raw.split('#').next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let fields: Vec<&str> = content.split_whitespace().collect();
            if fields[0] == "shards" {
                if count.is_some() {
                    return Err(err("`shards` is declared twice".into()));
                }
                let [_, n] = fields[..] else {
                    return Err(err("expected `shards N`".into()));
                };
                let n = parse_count(n).map_err(err)?;
                count = Some(n);
                assigned = vec![None; n as usize];
                continue;
            }
            let Some(n) = count else {
                return Err(err("`shards N` must come before the first range".into()));
            };
            let [range, url, template] = fields[..] else {
                return Err(err(format!(
                    "expected `RANGE URL DATABASE`, got {} fields",
                    fields.len()
                )));
            };
            let (lo, hi) = parse_range(range, n).map_err(err)?;
            let host = match host_index.get(url) {
                Some(&h) => h,
                None => {
                    let parsed = Host::parse(url).map_err(err)?;
                    hosts.push(parsed);
                    host_index.insert(url.to_string(), hosts.len() - 1);
                    hosts.len() - 1
                }
            };
            if hi > lo && !template.contains("{shard}") {
                return Err(err(format!(
                    "database `{template}` has no {{shard}}: every shard in {range} \
                     needs its own database"
                )));
            }
            for shard in lo..=hi {
                if let Some((_, other)) = &assigned[shard as usize] {
                    return Err(err(format!(
                        "shard {shard} is already assigned on line {other}"
                    )));
                }
                let database = template.replace("{shard}", &shard.to_string());
                check_database_name(&database).map_err(err)?;
                if !databases.insert((host, database.clone())) {
                    return Err(err(format!(
                        "database {database} on {} holds two shards",
                        hosts[host]
                    )));
                }
                assigned[shard as usize] = Some((Shard { host, database }, line));
            }
        }

        if count.is_none() {
            return Err(ShardMapError::MissingCount);
        }
        let gaps = gaps(assigned.iter().map(Option::is_some));
        if !gaps.is_empty() {
            return Err(ShardMapError::Unassigned(gaps));
        }
        let shards = assigned
            .into_iter()
            .map(|s| s.expect("gaps were checked").0)
            .collect();
        Ok(ShardMap { hosts, shards })
    }

    /// Reads and parses a shard map file.
    ///
    /// # Errors
    ///
    /// [`ShardMapError::Io`] if the file cannot be read, else as [`parse`](Self::parse).
    pub fn load(path: impl AsRef<Path>) -> Result<ShardMap, ShardMapError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ShardMapError::Io {
            path: path.display().to_string(),
            source,
        })?;
        ShardMap::parse(&text)
    }

    /// Every shard on one server, in databases `{prefix}{shard}`: for tests and for
    /// a single-machine deployment.
    ///
    /// # Errors
    ///
    /// [`ShardMapError::Invalid`] for a bad URL, a bad prefix or a shard count outside
    /// `1..=MAX_SHARDS`.
    pub fn single_host(url: &str, prefix: &str, shards: u32) -> Result<ShardMap, ShardMapError> {
        let invalid = ShardMapError::Invalid;
        parse_count(&shards.to_string()).map_err(invalid)?;
        let host = Host::parse(url).map_err(invalid)?;
        let shards = (0..shards)
            .map(|s| {
                let database = format!("{prefix}{s}");
                check_database_name(&database).map_err(invalid)?;
                Ok(Shard { host: 0, database })
            })
            .collect::<Result<_, ShardMapError>>()?;
        Ok(ShardMap {
            hosts: vec![host],
            shards,
        })
    }

    /// The number of logical shards, `N`.
    pub fn len(&self) -> u32 {
        self.shards.len() as u32
    }

    /// Always false: a map has at least one shard. (For clippy's `len_without_is_empty`.)
    pub fn is_empty(&self) -> bool {
        self.shards.is_empty()
    }

    /// The logical shard holding `user`'s rows: `splitmix64(user) % N`.
    pub fn shard_of(&self, user: u64) -> u32 {
        (splitmix64(user) % self.shards.len() as u64) as u32
    }

    /// The database of a logical shard.
    ///
    /// # Panics
    ///
    /// If `shard >= len()`.
    pub fn database(&self, shard: u32) -> &str {
        &self.shards[shard as usize].database
    }

    /// The index (into [`hosts`](Self::hosts)) of the host holding a logical shard.
    ///
    /// # Panics
    ///
    /// If `shard >= len()`.
    pub fn host_of(&self, shard: u32) -> usize {
        self.shards[shard as usize].host
    }

    /// The host holding a logical shard.
    ///
    /// # Panics
    ///
    /// If `shard >= len()`.
    pub fn host(&self, shard: u32) -> &Host {
        &self.hosts[self.host_of(shard)]
    }

    /// Every distinct host, in order of first appearance.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// How many logical shards live on host `host`.
    pub fn shards_on(&self, host: usize) -> usize {
        self.shards.iter().filter(|s| s.host == host).count()
    }
}

impl FromStr for ShardMap {
    type Err = ShardMapError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ShardMap::parse(s)
    }
}

fn parse_count(s: &str) -> Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if (1..=MAX_SHARDS).contains(&n) => Ok(n),
        _ => Err(format!("`{s}` is not a shard count in 1..={MAX_SHARDS}")),
    }
}

/// `lo-hi` or `n`, within `0..count`.
fn parse_range(s: &str, count: u32) -> Result<(u32, u32), String> {
    let num = |t: &str| {
        t.parse::<u32>()
            .map_err(|_| format!("`{s}` is not a shard range (`0-3` or `5`)"))
    };
    let (lo, hi) = match s.split_once('-') {
        Some((lo, hi)) => (num(lo)?, num(hi)?),
        None => (num(s)?, num(s)?),
    };
    if lo > hi {
        return Err(format!("range {s} is backwards"));
    }
    if hi >= count {
        return Err(format!(
            "range {s} is out of range: shards are numbered 0-{}",
            count - 1
        ));
    }
    Ok((lo, hi))
}

/// Database names are spliced into SQL as identifiers (they cannot be bound
/// parameters), so only the characters MySQL allows unquoted are accepted.
fn check_database_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_DATABASE_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
        && !name.bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a valid database name (1-{MAX_DATABASE_LEN} of A-Z a-z 0-9 _ $, \
             not all digits)"
        ))
    }
}

/// `"4-5, 9"` for the positions that are false.
fn gaps(present: impl Iterator<Item = bool>) -> String {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let flush = |start: usize, end: usize, out: &mut Vec<String>| {
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    };
    let mut len = 0;
    for (i, p) in present.enumerate() {
        len = i + 1;
        match (p, start) {
            (false, None) => start = Some(i),
            (true, Some(s)) => {
                flush(s, i - 1, &mut out);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        flush(s, len - 1, &mut out);
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_HOSTS: &str = "\
# comment
shards 8
0-3 mysql://root@127.0.0.1:3306 relcache_s{shard}
4-7 mysql://app:secret@10.0.0.2:3307 relcache_s{shard}  # trailing comment
";

    #[test]
    fn splitmix64_vectors() {
        // The first outputs of the reference splitmix64 generator seeded with 0 are
        // splitmix64(0), splitmix64(golden), splitmix64(2 * golden).
        const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(GOLDEN), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(splitmix64(GOLDEN.wrapping_mul(2)), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn parses_two_hosts() {
        let map = ShardMap::parse(TWO_HOSTS).unwrap();
        assert_eq!(map.len(), 8);
        assert_eq!(map.hosts().len(), 2);
        assert_eq!(map.database(0), "relcache_s0");
        assert_eq!(map.database(7), "relcache_s7");
        assert_eq!(map.host(3).label(), "127.0.0.1:3306");
        assert_eq!(map.host(4).label(), "10.0.0.2:3307");
        assert_eq!(map.shards_on(0), 4);
        // The password never reaches Debug output.
        assert!(!format!("{map:?}").contains("secret"));
    }

    #[test]
    fn same_url_is_one_host() {
        let map = ShardMap::parse(
            "shards 4\n0-1 mysql://root@h:1 a{shard}\n2-3 mysql://root@h:1 b{shard}\n",
        )
        .unwrap();
        assert_eq!(map.hosts().len(), 1);
        assert_eq!(map.database(2), "b2");
    }

    #[test]
    fn shard_of_is_stable_and_spread() {
        let map = ShardMap::parse(TWO_HOSTS).unwrap();
        // Pinned: a change here would move users to other shards.
        let got: Vec<u32> = (0..8).map(|u| map.shard_of(u)).collect();
        assert_eq!(got, [7, 1, 6, 5, 2, 2, 0, 7]);
        let big = ShardMap::single_host("mysql://root@h:1", "s", 4096).unwrap();
        let got: Vec<u32> = [1, 42, 1_000_000, u64::MAX]
            .map(|u| big.shard_of(u))
            .to_vec();
        assert_eq!(got, [3265, 3733, 1511, 3104]);
        let mut counts = [0u32; 8];
        for u in 0..8000 {
            counts[map.shard_of(u) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    fn error(text: &str) -> String {
        ShardMap::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn errors_are_specific() {
        let url = "mysql://root@127.0.0.1:3306";
        assert_eq!(
            error(&format!(
                "shards 8\n0-3 {url} d{{shard}}\n6-7 {url} d{{shard}}\n"
            )),
            "shards 4-5 are assigned to no host"
        );
        assert_eq!(
            error(&format!(
                "shards 8\n0-4 {url} d{{shard}}\n4-7 {url} e{{shard}}\n"
            )),
            "line 3: shard 4 is already assigned on line 2"
        );
        assert_eq!(
            error(&format!("shards 8\n0-8 {url} d{{shard}}\n")),
            "line 2: range 0-8 is out of range: shards are numbered 0-7"
        );
        assert_eq!(
            error(&format!("0-8 {url} d{{shard}}\n")),
            "line 1: `shards N` must come before the first range"
        );
        assert_eq!(
            error("# nothing\n"),
            ShardMapError::MissingCount.to_string()
        );
        assert!(error("shards 0\n").contains("not a shard count"));
        assert!(error("shards 2\nshards 2\n").contains("declared twice"));
        assert!(error(&format!("shards 2\n0-1 {url} same\n")).contains("has no {shard}"));
        assert!(error(&format!("shards 2\n0-1 {url} bad-name{{shard}}\n"))
            .contains("not a valid database name"));
        assert!(error("shards 2\n0-1 mysql://root@h:1/db d{shard}\n").contains("must not name"));
        assert!(error("shards 2\n0-1 http://h d{shard}\n").contains("bad URL"));
        assert!(error("shards 2\n1-0 mysql://root@h:1 d{shard}\n").contains("backwards"));
        assert!(error("shards 2\n0-1 mysql://root@h:1\n").contains("got 2 fields"));
        assert_eq!(
            error("shards 6\n1 mysql://root@h:1 d{shard}\n3 mysql://root@h:1 d{shard}\n"),
            "shards 0, 2, 4-5 are assigned to no host"
        );
    }

    #[test]
    fn single_host_names_databases() {
        let map = ShardMap::single_host("mysql://root@127.0.0.1:3306", "t_", 4).unwrap();
        assert_eq!(map.len(), 4);
        assert_eq!(map.database(3), "t_3");
        assert!(ShardMap::single_host("mysql://root@h:1", "bad-", 4).is_err());
        assert!(ShardMap::single_host("mysql://root@h:1", "t_", 0).is_err());
    }
}
