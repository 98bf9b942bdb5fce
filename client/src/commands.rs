//! Typed commands: a [`Cmd`] is a command's arguments together with the code that
//! turns its reply into a Rust value.
//!
//! Keeping the two together, instead of writing each typed method against a
//! connection, means one definition serves every way of running it: on a
//! [`Client`] ([`Client::run`]), on a [`Pool`] with its timeouts ([`Pool::run`]),
//! and pipelined ([`Client::run_pipeline`]). The typed methods on `Client` and
//! `Pool` (`client.idset_exists(key, id)`) are one-line shorthands generated from
//! one list at the bottom of this file.
//!
//! Every parser accepts the RESP2 and the RESP3 shape of its reply (a missing key
//! is `$-1` or `*-1` in RESP2 and `_` in RESP3; SINTER's array is a `~` set in
//! RESP3), and anything else is [`Error::UnexpectedReply`], never a guess.
//!
//! Not here: commands whose replies a [`Frame`] already serves well (GET, SET,
//! INFO …); send those with [`Client::cmd`].

use std::fmt;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use relcache_protocol::idset::Builder;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{Client, Error, Frame, Pool};

/// Turns a reply (never an error reply: those become [`Error::Server`] first).
pub(crate) type Parser<T> = Box<dyn FnOnce(Frame) -> Result<T, Error> + Send>;

/// A command and how to read its reply as a `T`.
///
/// Build one with a constructor named after the command ([`Cmd::idset_exists`],
/// [`Cmd::idset_load_table`] …) or, for a command this crate does not type, with
/// [`Cmd::new`]; run it with [`Client::run`] or [`Pool::run`], or many at once with
/// [`Client::run_pipeline`].
///
/// ```no_run
/// # async fn example(client: &mut relcache_client::Client) -> Result<(), relcache_client::Error> {
/// use relcache_client::{build_table, Cmd, LoadOpts};
///
/// client
///     .run(Cmd::idset_load_table("user:1:following", build_table(&[10, 20, 30]), LoadOpts::default()))
///     .await?;
/// // One round trip for three keys; `None` is a cache miss, not a "no".
/// let answers = client
///     .run_pipeline(vec![
///         Cmd::idset_exists("user:1:following", 20),
///         Cmd::idset_exists("user:2:following", 20),
///     ])
///     .await?;
/// assert_eq!(answers[0].as_ref().unwrap(), &Some(true));
/// # Ok(())
/// # }
/// ```
pub struct Cmd<T> {
    args: Vec<Bytes>,
    parse: Parser<T>,
    blocks_for: Duration,
}

impl<T> fmt::Debug for Cmd<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.args.first().map(|a| String::from_utf8_lossy(a));
        f.debug_struct("Cmd")
            .field("name", &name)
            .field("args", &self.args.len())
            .field("blocks_for", &self.blocks_for)
            .finish_non_exhaustive()
    }
}

impl<T> Cmd<T> {
    /// A command typed by the caller: `args` (its name first) and a `parse` for
    /// its reply. An error reply never reaches `parse`; it is [`Error::Server`].
    pub fn new(
        args: Vec<Bytes>,
        parse: impl FnOnce(Frame) -> Result<T, Error> + Send + 'static,
    ) -> Self {
        Cmd {
            args,
            parse: Box::new(parse),
            blocks_for: Duration::ZERO,
        }
    }

    /// The arguments sent, the command name first.
    pub fn args(&self) -> &[Bytes] {
        &self.args
    }

    /// How long the server may legitimately hold the reply back (a lease wait).
    /// [`Pool::run`] adds it to the command timeout, so a call that waits as asked
    /// is not taken for a dead server.
    pub fn blocks_for(&self) -> Duration {
        self.blocks_for
    }

    /// Reads `reply` as this command's answer.
    ///
    /// # Errors
    ///
    /// [`Error::Server`] for an error reply, [`Error::UnexpectedReply`] for a reply
    /// of the wrong shape.
    pub fn parse(self, reply: Frame) -> Result<T, Error> {
        finish(self.parse, reply)
    }

    /// The same command with its answer passed through `f`: a caller that only
    /// needs to know a command succeeded maps it to `()`, and commands of different
    /// answer types can then share one pipeline.
    pub fn map<U>(self, f: impl FnOnce(T) -> U + Send + 'static) -> Cmd<U>
    where
        T: 'static,
    {
        let parse = self.parse;
        Cmd {
            args: self.args,
            parse: Box::new(move |reply| parse(reply).map(f)),
            blocks_for: self.blocks_for,
        }
    }

    /// Declares that the server may hold the reply back for up to `wait` (a
    /// command sent with `BLOCK`), so [`Pool::run`] allows that much on top of the
    /// command timeout instead of taking the wait for a dead server. The typed lease
    /// commands declare their own; a command built with [`Cmd::new`] that blocks
    /// must say so here. Rounded up to whole milliseconds, as `BLOCK` is sent.
    pub fn blocking(mut self, wait: Duration) -> Self {
        self.blocks_for = round_up_to_ms(wait);
        self
    }
}

impl<T> Cmd<T> {
    /// The arguments, the parser and the declared wait, apart: a router that may
    /// send the arguments more than once (a cluster redirect) parses only the last
    /// reply.
    pub(crate) fn into_parts(self) -> (Vec<Bytes>, Parser<T>, Duration) {
        (self.args, self.parse, self.blocks_for)
    }
}

pub(crate) fn finish<T>(parse: Parser<T>, reply: Frame) -> Result<T, Error> {
    match reply {
        Frame::Error(text) => Err(Error::Server(String::from_utf8_lossy(&text).into_owned())),
        reply => parse(reply),
    }
}

/// Options of `IDSET.LOAD`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOpts {
    /// Expire the set after this long (sent as `PX`, rounded up to whole
    /// milliseconds), so a set that writes stop reaching is reloaded eventually.
    pub ttl: Option<Duration>,
    /// Store only if this lease token, from [`Cmd::idset_lease`] or
    /// [`Cmd::idset_mexistsbin_lease`], is still the key's lease: a write since the
    /// lease was granted revoked it, and what the filler read is then stale.
    pub lease: Option<u64>,
    /// The sequence number of the newest change of the source that the ids
    /// include (sent as `SEQ`), so that write-throughs of later changes
    /// ([`Cmd::idset_add_xx_seq`], [`Cmd::idset_rem_seq`]) apply in order.
    pub seq: Option<u64>,
}

/// Options of the lease commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaseOpts {
    /// How long a granted lease lasts (sent as `PX`), so a filler that dies blocks
    /// others only that long; `None` takes the server's default.
    pub px: Option<Duration>,
    /// How long to wait when someone else holds the lease, for their fill to land
    /// or the lease to end (sent as `BLOCK`); `None` or zero answers
    /// [`Leased::Busy`] at once. There is no "wait until it resolves" (`BLOCK 0`):
    /// a pool must know how long a call may take to tell a wait from a dead server.
    pub wait: Option<Duration>,
}

/// The answer to a read that takes a lease on a miss.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Leased<T> {
    /// The key is cached: here is the answer (for [`Cmd::idset_lease`], `()`: the key
    /// is present and there is nothing to fill).
    Hit(T),
    /// The key is missing and this caller holds the lease, the token, to fill it:
    /// read the source of truth, store it with [`LoadOpts::lease`] set, or give the
    /// lease up with [`Cmd::idset_release`] if that fails so that others need not
    /// wait for it to lapse.
    Granted(u64),
    /// Someone else is filling the key and the wait ran out: answer from the source
    /// of truth without filling, or ask again.
    Busy,
}

/// Builds the idset table holding `ids` (duplicates collapse), the byte string that
/// [`Cmd::idset_load_table`] stores: building it here spares the server the work
/// (it only validates the table), and makes a fill one command whatever its size.
/// [`TableBuilder`](crate::TableBuilder) picks the seed or leaves room for adds.
///
/// ```
/// let table = relcache_client::build_table(&[30, 10, 20, 10]);
/// let set = relcache_protocol::idset::validate(&table).unwrap();
/// assert_eq!(set.len(), 3);
/// assert!(set.contains(20) && !set.contains(25));
/// ```
///
/// # Panics
///
/// If the table would need more than `u32::MAX` slots (billions of ids).
pub fn build_table(ids: &[u64]) -> Vec<u8> {
    Builder::new().build(ids)
}

/// Arguments under construction.
struct Args(Vec<Bytes>);

impl Args {
    fn new(name: &'static str) -> Self {
        Args(vec![Bytes::from_static(name.as_bytes())])
    }

    fn arg(mut self, arg: impl AsRef<[u8]>) -> Self {
        self.0.push(Bytes::copy_from_slice(arg.as_ref()));
        self
    }

    /// An argument already in a `Bytes` (a table, packed ids): no copy.
    fn data(mut self, data: Bytes) -> Self {
        self.0.push(data);
        self
    }

    fn word(mut self, word: &'static str) -> Self {
        self.0.push(Bytes::from_static(word.as_bytes()));
        self
    }

    fn int(mut self, n: u64) -> Self {
        self.0.push(Bytes::from(n.to_string()));
        self
    }

    fn ids(self, ids: &[u64]) -> Self {
        ids.iter().fold(self, |args, &id| args.int(id))
    }

    fn keys(self, keys: &[impl AsRef<[u8]>]) -> Self {
        keys.iter().fold(self, |args, key| args.arg(key))
    }

    /// `WORD ms` if the duration is set: rounded up, so a wait is never shortened.
    fn millis(self, word: &'static str, d: Option<Duration>) -> Self {
        match d {
            None => self,
            Some(d) => {
                let ms = d.as_nanos().div_ceil(1_000_000);
                self.word(word).int(u64::try_from(ms).unwrap_or(u64::MAX))
            }
        }
    }

    /// `BLOCK ms` for a wait, and nothing for none: `BLOCK 0` means "forever".
    fn wait(self, wait: Option<Duration>) -> Self {
        self.millis("BLOCK", wait.filter(|d| !d.is_zero()))
    }

    fn parse_with<T>(
        self,
        parse: impl FnOnce(Frame) -> Result<T, Error> + Send + 'static,
    ) -> Cmd<T> {
        Cmd::new(self.0, parse)
    }
}

/// `d` rounded up to whole milliseconds, the unit durations are sent in.
fn round_up_to_ms(d: Duration) -> Duration {
    let ms = d.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}

/// Little-endian `u64`s back to back, the IDSET family's binary id list.
fn pack(ids: &[u64]) -> Bytes {
    let mut out = BytesMut::with_capacity(ids.len() * 8);
    ids.iter().for_each(|&id| out.put_u64_le(id));
    out.freeze()
}

impl Cmd<()> {
    /// `PING`: checks that the server answers, e.g. before trusting a connection.
    pub fn ping() -> Self {
        Args::new("PING").parse_with(|f| match f {
            Frame::Simple(s) if s == "PONG" => Ok(()),
            f => Err(unexpected("PONG", &f)),
        })
    }

    /// `SET key value`.
    pub fn set(key: impl AsRef<[u8]>, value: impl Into<Bytes>) -> Self {
        Args::new("SET")
            .arg(key)
            .data(value.into())
            .parse_with(|f| match f {
                Frame::Simple(s) if s == "OK" => Ok(()),
                f => Err(unexpected("OK", &f)),
            })
    }
}

impl Cmd<Vec<(String, String)>> {
    /// `INFO section`: the section's `field:value` lines, in order (headers and
    /// blank lines left out). A RESP3 server answers with a verbatim string; both
    /// forms are read.
    pub fn info(section: &'static str) -> Self {
        Args::new("INFO").word(section).parse_with(|f| {
            let text = match f {
                Frame::Bulk(b) => b,
                Frame::Verbatim { text, .. } => text,
                f => return Err(unexpected("INFO text", &f)),
            };
            Ok(String::from_utf8_lossy(&text)
                .lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect())
        })
    }
}

impl Cmd<Option<Bytes>> {
    /// `GET key`: the string value, or `None` for a missing key.
    pub fn get(key: impl AsRef<[u8]>) -> Self {
        Args::new("GET").arg(key).parse_with(|f| {
            nil_or(f, |f| match f {
                Frame::Bulk(b) => Ok(b),
                f => Err(unexpected("a bulk string", &f)),
            })
        })
    }
}

impl Cmd<Option<Bytes>> {
    /// `IDSET.TABLE key`: the stored table, byte for byte (check membership with a
    /// reader of the table format, after validating it), or `None` if the key is
    /// missing.
    pub fn idset_table(key: impl AsRef<[u8]>) -> Self {
        Args::new("IDSET.TABLE").arg(key).parse_with(|f| {
            nil_or(f, |f| match f {
                Frame::Bulk(b) => Ok(b),
                f => Err(unexpected("a bulk string", &f)),
            })
        })
    }
}

impl Cmd<u64> {
    /// `DEL key …`: how many of the keys existed. Deleting a key also revokes any
    /// lease on it, so an in-flight fill cannot resurrect what was deleted.
    pub fn del(keys: &[impl AsRef<[u8]>]) -> Self {
        Args::new("DEL").keys(keys).parse_with(count)
    }

    /// `IDSET.ADD key id …`: how many ids were new; creates the key if missing.
    /// For write-through to a cache, [`idset_add_xx`](Cmd::idset_add_xx) is
    /// usually the one wanted.
    pub fn idset_add(key: impl AsRef<[u8]>, ids: &[u64]) -> Self {
        Args::new("IDSET.ADD").arg(key).ids(ids).parse_with(count)
    }
}

impl Cmd<bool> {
    /// `IDSET.LOAD key … TABLE table`: replaces the key with a table built by
    /// [`build_table`]. `true` if stored; `false` only with [`LoadOpts::lease`],
    /// when the lease was revoked or lapsed and the fill was refused.
    ///
    /// The table is taken by value (a `Vec<u8>` or `Bytes` moves into the command
    /// without a copy), since it can be megabytes; sending it copies it once, into
    /// the connection's write buffer.
    pub fn idset_load_table(
        key: impl AsRef<[u8]>,
        table: impl Into<Bytes>,
        opts: LoadOpts,
    ) -> Self {
        load(key, opts)
            .word("TABLE")
            .data(table.into())
            .parse_with(stored)
    }

    /// `IDSET.LOAD key … PACKED ids`: replaces the key with a set of `ids`, built by
    /// the server; otherwise as [`idset_load_table`](Cmd::idset_load_table).
    pub fn idset_load_ids(key: impl AsRef<[u8]>, ids: &[u64], opts: LoadOpts) -> Self {
        load(key, opts)
            .word("PACKED")
            .data(pack(ids))
            .parse_with(stored)
    }

    /// `IDSET.RELEASE key token`: gives a lease up after a failed fill, so callers
    /// waiting on it are let go now instead of when it lapses. `false` if the lease
    /// was no longer held (revoked, lapsed or already used).
    pub fn idset_release(key: impl AsRef<[u8]>, token: u64) -> Self {
        Args::new("IDSET.RELEASE")
            .arg(key)
            .int(token)
            .parse_with(flag)
    }
}

fn load(key: impl AsRef<[u8]>, opts: LoadOpts) -> Args {
    let args = Args::new("IDSET.LOAD").arg(key).millis("PX", opts.ttl);
    let args = match opts.lease {
        Some(token) => args.word("LEASE").int(token),
        None => args,
    };
    match opts.seq {
        Some(seq) => args.word("SEQ").int(seq),
        None => args,
    }
}

impl Cmd<Option<bool>> {
    /// `IDSET.EXISTS key id`: whether `id` is in the set; `None` if the key is not
    /// cached, which is a miss to fill, not a "no".
    pub fn idset_exists(key: impl AsRef<[u8]>, id: u64) -> Self {
        Args::new("IDSET.EXISTS")
            .arg(key)
            .int(id)
            .parse_with(|f| nil_or(f, flag))
    }
}

impl Cmd<Option<Vec<bool>>> {
    /// `IDSET.MEXISTS key id …`: membership of each id, in order; `None` if the
    /// key is not cached. The ids go out in decimal;
    /// [`idset_mexistsbin`](Cmd::idset_mexistsbin) is the compact form.
    pub fn idset_mexists(key: impl AsRef<[u8]>, ids: &[u64]) -> Self {
        let n = ids.len();
        Args::new("IDSET.MEXISTS")
            .arg(key)
            .ids(ids)
            .parse_with(move |f| nil_or(f, |f| flags(f, n)))
    }

    /// `IDSET.MEXISTSBIN key packed`: as [`idset_mexists`](Cmd::idset_mexists),
    /// with 8 bytes per id out and one bit per id back, nothing to format or parse
    /// on either side.
    pub fn idset_mexistsbin(key: impl AsRef<[u8]>, ids: &[u64]) -> Self {
        let n = ids.len();
        Args::new("IDSET.MEXISTSBIN")
            .arg(key)
            .data(pack(ids))
            .parse_with(move |f| nil_or(f, |f| bitmap(f, n)))
    }
}

impl Cmd<Leased<Vec<bool>>> {
    /// `IDSET.MEXISTSBIN key packed LEASE [PX ms] [BLOCK ms]`: the read-through
    /// form of [`idset_mexistsbin`](Cmd::idset_mexistsbin). On a miss exactly one
    /// caller is [`Granted`](Leased::Granted) the fill while the others wait up to
    /// `opts.wait` for it (and get the answer) instead of all reading the database.
    pub fn idset_mexistsbin_lease(key: impl AsRef<[u8]>, ids: &[u64], opts: LeaseOpts) -> Self {
        let n = ids.len();
        Args::new("IDSET.MEXISTSBIN")
            .arg(key)
            .data(pack(ids))
            .word("LEASE")
            .millis("PX", opts.px)
            .wait(opts.wait)
            .parse_with(move |f| leased(f, |f| bitmap(f, n)))
            .blocking(opts.wait.unwrap_or_default())
    }
}

impl Cmd<Leased<()>> {
    /// `IDSET.LEASE key [PX ms] [BLOCK ms]`: asks to fill a key before reading the
    /// source of truth, for fills not triggered by a read that could take the
    /// lease itself. [`Hit`](Leased::Hit) means the key is present.
    pub fn idset_lease(key: impl AsRef<[u8]>, opts: LeaseOpts) -> Self {
        Args::new("IDSET.LEASE")
            .arg(key)
            .millis("PX", opts.px)
            .wait(opts.wait)
            .parse_with(|f| {
                leased(f, |f| match f {
                    Frame::Integer(0) => Ok(()),
                    f => Err(unexpected("0, a lease token or nil", &f)),
                })
            })
            .blocking(opts.wait.unwrap_or_default())
    }
}

impl Cmd<Option<u64>> {
    /// `IDSET.ADD key XX id …`: adds only to a cached set (`None` if the key is
    /// missing), so a write-through never caches a partial set that would then
    /// answer "no" for ids it never held.
    pub fn idset_add_xx(key: impl AsRef<[u8]>, ids: &[u64]) -> Self {
        Args::new("IDSET.ADD")
            .arg(key)
            .word("XX")
            .ids(ids)
            .parse_with(|f| nil_or(f, count))
    }

    /// `IDSET.ADD key XX SEQ seq id …`: [`idset_add_xx`](Cmd::idset_add_xx) as
    /// change `seq` of the set's source, applied only in the order the source
    /// committed its changes: the same change twice adds nothing (`Some(0)`), and a
    /// change older than what the set reflects — it arrived out of order — drops the
    /// key and answers `None`, so the next read reloads it.
    pub fn idset_add_xx_seq(key: impl AsRef<[u8]>, seq: u64, ids: &[u64]) -> Self {
        Args::new("IDSET.ADD")
            .arg(key)
            .word("XX")
            .word("SEQ")
            .int(seq)
            .ids(ids)
            .parse_with(|f| nil_or(f, count))
    }

    /// `IDSET.REM key SEQ seq id …`: [`idset_rem`](Cmd::idset_rem) as change `seq`
    /// of the set's source, in order as [`idset_add_xx_seq`](Cmd::idset_add_xx_seq).
    pub fn idset_rem_seq(key: impl AsRef<[u8]>, seq: u64, ids: &[u64]) -> Self {
        Args::new("IDSET.REM")
            .arg(key)
            .word("SEQ")
            .int(seq)
            .ids(ids)
            .parse_with(|f| nil_or(f, count))
    }

    /// `IDSET.REM key id …`: how many ids were removed; `None` if the key is
    /// missing. Removing the last id keeps an empty set, a cached "follows nobody".
    pub fn idset_rem(key: impl AsRef<[u8]>, ids: &[u64]) -> Self {
        Args::new("IDSET.REM")
            .arg(key)
            .ids(ids)
            .parse_with(|f| nil_or(f, count))
    }

    /// `IDSET.CARD key`: how many ids the set holds; `None` if the key is missing.
    pub fn idset_card(key: impl AsRef<[u8]>) -> Self {
        Args::new("IDSET.CARD")
            .arg(key)
            .parse_with(|f| nil_or(f, count))
    }
}

impl Cmd<Option<Vec<u64>>> {
    /// `IDSET.MEMBERS key PACKED`: every id, in table order (not sorted); `None`
    /// if the key is missing. Packed, so a large set costs 8 bytes per id.
    pub fn idset_members(key: impl AsRef<[u8]>) -> Self {
        Args::new("IDSET.MEMBERS")
            .arg(key)
            .word("PACKED")
            .parse_with(|f| nil_or(f, packed_ids))
    }
}

impl Cmd<Vec<Option<bool>>> {
    /// `IDSET.WHICH id key …`: whether `id` is in each key's set, in key order,
    /// `None` for a key that is not cached ("which of the people I follow follow
    /// X?", with the misses to fill).
    pub fn idset_which(id: u64, keys: &[impl AsRef<[u8]>]) -> Self {
        let n = keys.len();
        Args::new("IDSET.WHICH")
            .int(id)
            .keys(keys)
            .parse_with(move |f| {
                answers(f, n, |f| match f {
                    f if is_nil(&f) => Ok(None),
                    f => flag(f).map(Some),
                })
            })
    }
}

impl Cmd<Vec<u64>> {
    /// `SINTER key …`: the ids in every set, sorted (the server's order is
    /// arbitrary, and sorted ids are what callers compare and page through).
    pub fn sinter(keys: &[impl AsRef<[u8]>]) -> Self {
        Args::new("SINTER").keys(keys).parse_with(|f| {
            let mut ids = each(f, decimal_id)?;
            ids.sort_unstable();
            Ok(ids)
        })
    }
}

// ---- Reply shapes. ----

fn unexpected(wanted: &str, got: &Frame) -> Error {
    let mut got = format!("{got:?}");
    if got.len() > 80 {
        let end = (0..=77)
            .rev()
            .find(|&i| got.is_char_boundary(i))
            .unwrap_or(0);
        got.truncate(end);
        got.push_str("...");
    }
    Error::UnexpectedReply(format!("wanted {wanted}, got {got}"))
}

/// A missing value: `$-1` / `*-1` in RESP2, `_` in RESP3.
fn is_nil(f: &Frame) -> bool {
    matches!(f, Frame::Null | Frame::NullArray)
}

fn nil_or<T>(f: Frame, parse: impl FnOnce(Frame) -> Result<T, Error>) -> Result<Option<T>, Error> {
    if is_nil(&f) {
        Ok(None)
    } else {
        parse(f).map(Some)
    }
}

/// 1 or 0 (a RESP3 boolean is accepted too).
fn flag(f: Frame) -> Result<bool, Error> {
    match f {
        Frame::Integer(0) | Frame::Boolean(false) => Ok(false),
        Frame::Integer(1) | Frame::Boolean(true) => Ok(true),
        f => Err(unexpected("1 or 0", &f)),
    }
}

fn count(f: Frame) -> Result<u64, Error> {
    match f {
        Frame::Integer(n) if n >= 0 => Ok(n as u64),
        f => Err(unexpected("a count", &f)),
    }
}

/// The elements of an array (or RESP3 set), each read by `parse`.
fn each<T>(f: Frame, parse: impl FnMut(Frame) -> Result<T, Error>) -> Result<Vec<T>, Error> {
    match f {
        Frame::Array(items) | Frame::Set(items) => items.into_iter().map(parse).collect(),
        f => Err(unexpected("an array", &f)),
    }
}

/// One answer per question asked, in order: an array (a RESP3 set has no order,
/// so it is not accepted) of exactly `n` elements, each read by `parse`. A reply
/// with more or fewer answers would pair them with the wrong questions.
fn answers<T>(
    f: Frame,
    n: usize,
    parse: impl FnMut(Frame) -> Result<T, Error>,
) -> Result<Vec<T>, Error> {
    match f {
        Frame::Array(items) if items.len() == n => items.into_iter().map(parse).collect(),
        f => Err(unexpected(&format!("an array of {n} answers"), &f)),
    }
}

fn flags(f: Frame, n: usize) -> Result<Vec<bool>, Error> {
    answers(f, n, flag)
}

/// Bit `i` of byte `i / 8`, least significant first, for each of `n` ids.
fn bitmap(f: Frame, n: usize) -> Result<Vec<bool>, Error> {
    match f {
        Frame::Bulk(bits) if bits.len() == n.div_ceil(8) => {
            Ok((0..n).map(|i| bits[i / 8] & (1 << (i % 8)) != 0).collect())
        }
        f => Err(unexpected(
            &format!("a bitmap of {} bytes", n.div_ceil(8)),
            &f,
        )),
    }
}

fn packed_ids(f: Frame) -> Result<Vec<u64>, Error> {
    match f {
        Frame::Bulk(b) if b.len() % 8 == 0 => Ok(b
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8")))
            .collect()),
        f => Err(unexpected("packed ids", &f)),
    }
}

fn decimal_id(f: Frame) -> Result<u64, Error> {
    let id = match &f {
        Frame::Bulk(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        Frame::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    id.ok_or_else(|| unexpected("a decimal id", &f))
}

/// IDSET.LOAD: `OK` (or the number of ids stored) when stored, nil when a lease
/// fill was refused.
fn stored(f: Frame) -> Result<bool, Error> {
    match f {
        Frame::Simple(s) if s == "OK" => Ok(true),
        Frame::Integer(n) if n >= 0 => Ok(true),
        f if is_nil(&f) => Ok(false),
        f => Err(unexpected("OK or nil", &f)),
    }
}

/// A lease read: a token (an integer > 0) when granted, nil when busy, else the
/// answer, read by `hit`.
fn leased<T>(f: Frame, hit: impl FnOnce(Frame) -> Result<T, Error>) -> Result<Leased<T>, Error> {
    match f {
        Frame::Integer(token) if token > 0 => Ok(Leased::Granted(token as u64)),
        f if is_nil(&f) => Ok(Leased::Busy),
        f => hit(f).map(Leased::Hit),
    }
}

// ---- Running them. ----

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// Sends a typed command and reads its answer.
    ///
    /// # Errors
    ///
    /// As [`cmd`](Client::cmd), plus [`Error::UnexpectedReply`] if the reply has
    /// the wrong shape (the connection stays usable).
    pub async fn run<T>(&mut self, cmd: Cmd<T>) -> Result<T, Error> {
        let reply = self.cmd(&cmd.args).await?;
        (cmd.parse)(reply)
    }

    /// Sends typed commands in one write and reads their answers, in order; each
    /// answer fails or succeeds on its own, as with [`pipeline`](Client::pipeline).
    ///
    /// # Errors
    ///
    /// As [`pipeline`](Client::pipeline) for the batch as a whole.
    pub async fn run_pipeline<T>(
        &mut self,
        cmds: Vec<Cmd<T>>,
    ) -> Result<Vec<Result<T, Error>>, Error> {
        let (args, parsers): (Vec<_>, Vec<_>) = cmds.into_iter().map(|c| (c.args, c.parse)).unzip();
        let replies = self.pipeline(&args).await?;
        Ok(parsers
            .into_iter()
            .zip(replies)
            .map(|(parse, reply)| finish(parse, reply))
            .collect())
    }
}

/// Generates the typed shorthands on [`Client`] and [`Pool`] from one list, so the
/// two cannot drift apart and each command is documented once, on its [`Cmd`]
/// constructor.
///
/// The commands that may grant a lease are in the `client_only` list: a lease
/// holder must fill on the connection that won the lease (see
/// [`PooledConn::run`](crate::PooledConn::run)), and a pool shorthand would hand
/// that connection back and leave the fill to queue for another behind the very
/// callers parked until it lands. Run them with `pool.get()` and `conn.run(…)`.
macro_rules! shorthands {
    (
        both { $(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)* }
        client_only { $(fn $cname:ident($($carg:ident: $cty:ty),*) -> $cret:ty;)* }
    ) => {
        impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
            $(
                #[doc = concat!("Runs [`Cmd::", stringify!($name), "`]; see there.")]
                ///
                /// # Errors
                ///
                /// As [`run`](Client::run).
                pub async fn $name(&mut self, $($arg: $ty),*) -> Result<$ret, Error> {
                    self.run(Cmd::$name($($arg),*)).await
                }
            )*
            $(
                #[doc = concat!("Runs [`Cmd::", stringify!($cname), "`]; see there.")]
                ///
                /// # Errors
                ///
                /// As [`run`](Client::run).
                pub async fn $cname(&mut self, $($carg: $cty),*) -> Result<$cret, Error> {
                    self.run(Cmd::$cname($($carg),*)).await
                }
            )*
        }

        impl Pool {
            $(
                #[doc = concat!("Runs [`Cmd::", stringify!($name), "`] on a pooled connection; see there.")]
                ///
                /// # Errors
                ///
                /// As [`run`](Pool::run).
                pub async fn $name(&self, $($arg: $ty),*) -> Result<$ret, Error> {
                    self.run(Cmd::$name($($arg),*)).await
                }
            )*
        }
    };
}

shorthands! {
    both {
        fn ping() -> ();
        fn del(keys: &[impl AsRef<[u8]>]) -> u64;
        fn idset_load_table(key: impl AsRef<[u8]>, table: impl Into<Bytes>, opts: LoadOpts) -> bool;
        fn idset_load_ids(key: impl AsRef<[u8]>, ids: &[u64], opts: LoadOpts) -> bool;
        fn idset_exists(key: impl AsRef<[u8]>, id: u64) -> Option<bool>;
        fn idset_mexists(key: impl AsRef<[u8]>, ids: &[u64]) -> Option<Vec<bool>>;
        fn idset_mexistsbin(key: impl AsRef<[u8]>, ids: &[u64]) -> Option<Vec<bool>>;
        fn idset_release(key: impl AsRef<[u8]>, token: u64) -> bool;
        fn idset_add(key: impl AsRef<[u8]>, ids: &[u64]) -> u64;
        fn idset_add_xx(key: impl AsRef<[u8]>, ids: &[u64]) -> Option<u64>;
        fn idset_add_xx_seq(key: impl AsRef<[u8]>, seq: u64, ids: &[u64]) -> Option<u64>;
        fn idset_rem(key: impl AsRef<[u8]>, ids: &[u64]) -> Option<u64>;
        fn idset_rem_seq(key: impl AsRef<[u8]>, seq: u64, ids: &[u64]) -> Option<u64>;
        fn idset_card(key: impl AsRef<[u8]>) -> Option<u64>;
        fn idset_members(key: impl AsRef<[u8]>) -> Option<Vec<u64>>;
        fn idset_which(id: u64, keys: &[impl AsRef<[u8]>]) -> Vec<Option<bool>>;
        fn sinter(keys: &[impl AsRef<[u8]>]) -> Vec<u64>;
    }
    client_only {
        fn idset_mexistsbin_lease(key: impl AsRef<[u8]>, ids: &[u64], opts: LeaseOpts) -> Leased<Vec<bool>>;
        fn idset_lease(key: impl AsRef<[u8]>, opts: LeaseOpts) -> Leased<()>;
    }
}

#[cfg(test)]
mod tests;
