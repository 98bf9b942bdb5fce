//! The `arguments` of COMMAND DOCS: each command's syntax as a tree of named,
//! typed arguments, which `redis-cli` (7.2 and later) turns into its interactive
//! hints and client generators into typed calls.
//!
//! Each command's syntax is written once, below, in a compact usage notation close
//! to the one Redis's documentation prints, and parsed into the reply's shape when
//! asked for. A unit test parses every line and checks that every registered
//! command has one, and `tests/compat.rs` compares the trees with a real
//! redis-server's for every command the two share.
//!
//! The notation:
//!
//! | written | argument |
//! |---|---|
//! | `name` | a string named `name`; `key` alone is a key |
//! | `name<type>` | of that type: `key`, `integer`, `double`, `pattern`, `unix-time`, `string` |
//! | `TOKEN` | a pure token (named by the token in lower case) |
//! | `TOKEN name` | an argument introduced by a token |
//! | `[ … ]` | optional |
//! | `( … )` | a required group |
//! | `[label: a \| b]` | one of the alternatives (`oneof`), called `label` |
//! | `[label: a b]` | a group of arguments given together (`block`) |
//! | `TOKEN label: …` | inside brackets: the group is introduced by a token |
//! | `""` | MIGRATE's empty key: a pure token `""` named `empty_string` |
//! | `…...` | may repeat (`multiple`) |
//! | `TOKEN name+...` | may repeat, the token before each (`multiple_token`) |
//!
//! Key arguments are numbered in order for `key_spec_index`, which matches the
//! order of the command's key specs.

use bytes::Bytes;
use relcache_protocol::resp::Frame;

/// Every command's syntax, by name (subcommands as `container|sub`).
const SYNTAX: &[(&str, &str)] = &[
    // Connection.
    ("auth", "[username] password"),
    ("client|getname", ""),
    ("client|getredir", ""),
    ("client|help", ""),
    ("client|id", ""),
    ("client|info", ""),
    (
        "client|kill",
        "(filter: ip:port | (new-format: [ID client-id<integer>] | [TYPE normal_master_slave_pubsub: NORMAL | MASTER | SLAVE | REPLICA | PUBSUB] | [USER username] | [ADDR ip:port] | [LADDR ip:port] | [SKIPME yes/no] | [MAXAGE maxage<integer>])...)",
    ),
    (
        "client|list",
        "[TYPE normal_master_replica_pubsub: NORMAL | MASTER | REPLICA | PUBSUB] [ID id: client-id<integer>...]",
    ),
    ("client|no-evict", "(enabled: ON | OFF)"),
    ("client|no-touch", "(enabled: ON | OFF)"),
    ("client|tracking", "(status: ON | OFF) [REDIRECT client-id<integer>] [PREFIX prefix<string>+...] [BCAST] [OPTIN] [OPTOUT] [NOLOOP]"),
    ("client|caching", "(mode: YES | NO)"),
    ("client|setinfo", "(attr: LIB-NAME libname | LIB-VER libver)"),
    ("client|setname", "connection-name"),
    ("client|trackinginfo", ""),
    ("client|unblock", "client-id<integer> [timeout_error: TIMEOUT | ERROR]"),
    ("echo", "message"),
    (
        "hello",
        "[arguments: protover<integer> [AUTH username_password: username password] [SETNAME clientname]]",
    ),
    ("ping", "[message]"),
    ("quit", ""),
    ("reset", ""),
    ("select", "index<integer>"),
    // Cluster.
    ("asking", ""),
    ("readonly", ""),
    ("readwrite", ""),
    ("cluster|addslots", "slot<integer>..."),
    ("cluster|addslotsrange", "(start-slot_end-slot: start-slot<integer> end-slot<integer>)..."),
    ("cluster|bumpepoch", ""),
    ("cluster|count-failure-reports", "node-id"),
    ("cluster|countkeysinslot", "slot<integer>"),
    ("cluster|delslots", "slot<integer>..."),
    ("cluster|delslotsrange", "(start-slot_end-slot: start-slot<integer> end-slot<integer>)..."),
    ("cluster|failover", "[options: FORCE | TAKEOVER]"),
    ("cluster|flushslots", ""),
    ("cluster|forget", "node-id"),
    ("cluster|getkeysinslot", "slot<integer> count<integer>"),
    ("cluster|help", ""),
    ("cluster|info", ""),
    ("cluster|keyslot", "key<string>"),
    ("cluster|links", ""),
    ("cluster|meet", "ip port<integer> [cluster_bus_port<integer>]"),
    ("cluster|myid", ""),
    ("cluster|myshardid", ""),
    ("cluster|nodes", ""),
    ("cluster|replicas", "node-id"),
    ("cluster|replicate", "node-id"),
    ("cluster|reset", "[hard_soft: HARD | SOFT]"),
    ("cluster|saveconfig", ""),
    ("cluster|set-config-epoch", "config-epoch<integer>"),
    (
        "cluster|setslot",
        "slot<integer> (subcommand: IMPORTING node-id | MIGRATING node-id | NODE node-id | STABLE)",
    ),
    ("cluster|shards", ""),
    ("cluster|slaves", "node-id"),
    ("cluster|slots", ""),
    // COMMAND.
    ("command|count", ""),
    ("command|docs", "[command-name...]"),
    ("command|getkeys", ""),
    ("command|getkeysandflags", ""),
    ("command|help", ""),
    ("command|info", "[command-name...]"),
    (
        "command|list",
        "[FILTERBY filterby: MODULE module-name | ACLCAT category | PATTERN pattern<pattern>]",
    ),
    // Server.
    ("bgsave", "[SCHEDULE]"),
    ("config|get", "(parameter: parameter)..."),
    ("config|help", ""),
    ("config|resetstat", ""),
    ("config|rewrite", ""),
    ("config|set", "(parameter_value: parameter value)..."),
    ("dbsize", ""),
    ("flushall", "[async: ASYNC | SYNC]"),
    ("flushdb", "[async: ASYNC | SYNC]"),
    ("info", "[section...]"),
    ("lastsave", ""),
    ("memory|doctor", ""),
    ("memory|help", ""),
    ("memory|malloc-stats", ""),
    ("memory|purge", ""),
    ("memory|stats", ""),
    ("memory|usage", "key [SAMPLES count<integer>]"),
    ("save", ""),
    ("shutdown", "[nosave_save: NOSAVE | SAVE] [NOW] [FORCE] [ABORT]"),
    ("swapdb", "index1<integer> index2<integer>"),
    ("time", ""),
    // Observability.
    ("latency|help", ""),
    ("latency|histogram", "[command...]"),
    ("latency|history", "event"),
    ("latency|latest", ""),
    ("latency|reset", "[event...]"),
    ("monitor", ""),
    ("slowlog|get", "[count<integer>]"),
    ("slowlog|help", ""),
    ("slowlog|len", ""),
    ("slowlog|reset", ""),
    // Pub/sub.
    ("psubscribe", "(pattern: pattern<pattern>)..."),
    ("publish", "channel message"),
    ("pubsub|channels", "[pattern<pattern>]"),
    ("pubsub|help", ""),
    ("pubsub|numpat", ""),
    ("pubsub|numsub", "[channel...]"),
    ("pubsub|shardchannels", "[pattern<pattern>]"),
    ("pubsub|shardnumsub", "[shardchannel...]"),
    ("punsubscribe", "[pattern<pattern>...]"),
    ("spublish", "shardchannel message"),
    ("ssubscribe", "shardchannel..."),
    ("subscribe", "channel..."),
    ("sunsubscribe", "[shardchannel...]"),
    ("unsubscribe", "[channel...]"),
    // Transactions.
    ("discard", ""),
    ("exec", ""),
    // Scripting.
    ("eval", "script numkeys<integer> [key...] [arg...]"),
    ("eval_ro", "script numkeys<integer> [key...] [arg...]"),
    ("evalsha", "sha1 numkeys<integer> [key...] [arg...]"),
    ("evalsha_ro", "sha1 numkeys<integer> [key...] [arg...]"),
    ("script|exists", "sha1..."),
    ("script|flush", "[async: ASYNC | SYNC]"),
    ("script|help", ""),
    ("script|kill", ""),
    ("script|load", "script"),
    ("multi", ""),
    ("unwatch", ""),
    ("watch", "key..."),
    // Keys.
    ("del", "key..."),
    ("exists", "key..."),
    ("expire", "key seconds<integer> [condition: NX | XX | GT | LT]"),
    (
        "expireat",
        "key unix-time-seconds<unix-time> [condition: NX | XX | GT | LT]",
    ),
    ("expiretime", "key"),
    ("keys", "pattern<pattern>"),
    ("object|encoding", "key"),
    ("object|freq", "key"),
    ("object|help", ""),
    ("object|idletime", "key"),
    ("object|refcount", "key"),
    ("persist", "key"),
    (
        "pexpire",
        "key milliseconds<integer> [condition: NX | XX | GT | LT]",
    ),
    (
        "pexpireat",
        "key unix-time-milliseconds<unix-time> [condition: NX | XX | GT | LT]",
    ),
    ("pexpiretime", "key"),
    ("pttl", "key"),
    ("randomkey", ""),
    ("rename", "key newkey<key>"),
    ("dump", "key"),
    (
        "restore",
        "key ttl<integer> serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds<integer>] [FREQ frequency<integer>]",
    ),
    (
        "restore-asking",
        "key ttl<integer> serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds<integer>] [FREQ frequency<integer>]",
    ),
    (
        "migrate",
        "host port<integer> (key_or_empty_string: key | \"\") destination-db<integer> timeout<integer> [COPY] [REPLACE] [authentication: [AUTH password] | [AUTH2 username_password: username password]] [KEYS key...]",
    ),
    ("renamenx", "key newkey<key>"),
    (
        "scan",
        "cursor<integer> [MATCH pattern<pattern>] [COUNT count<integer>] [TYPE type]",
    ),
    ("touch", "key..."),
    ("ttl", "key"),
    ("type", "key"),
    ("unlink", "key..."),
    // Strings.
    ("append", "key value"),
    ("decr", "key"),
    ("decrby", "key decrement<integer>"),
    ("get", "key"),
    ("getdel", "key"),
    (
        "getex",
        "key [expiration: EX seconds<integer> | PX milliseconds<integer> | EXAT unix-time-seconds<unix-time> | PXAT unix-time-milliseconds<unix-time> | PERSIST]",
    ),
    ("getrange", "key start<integer> end<integer>"),
    ("getset", "key value"),
    ("incr", "key"),
    ("incrby", "key increment<integer>"),
    ("incrbyfloat", "key increment<double>"),
    ("mget", "key..."),
    ("mset", "(key_value: key value)..."),
    ("msetnx", "(key_value: key value)..."),
    ("psetex", "key milliseconds<integer> value"),
    (
        "set",
        "key value [condition: NX | XX] [GET] [expiration: EX seconds<integer> | PX milliseconds<integer> | EXAT unix-time-seconds<unix-time> | PXAT unix-time-milliseconds<unix-time> | KEEPTTL]",
    ),
    ("setex", "key seconds<integer> value"),
    ("setnx", "key value"),
    ("setrange", "key offset<integer> value"),
    ("strlen", "key"),
    ("substr", "key start<integer> end<integer>"),
    // Sets.
    ("sadd", "key member..."),
    ("scard", "key"),
    ("sdiff", "key..."),
    ("sdiffstore", "destination<key> key..."),
    ("sinter", "key..."),
    ("sintercard", "numkeys<integer> key... [LIMIT limit<integer>]"),
    ("sinterstore", "destination<key> key..."),
    ("sismember", "key member"),
    ("smembers", "key"),
    ("smismember", "key member..."),
    ("smove", "source<key> destination<key> member"),
    ("spop", "key [count<integer>]"),
    ("srandmember", "key [count<integer>]"),
    ("srem", "key member..."),
    (
        "sscan",
        "key cursor<integer> [MATCH pattern<pattern>] [COUNT count<integer>]",
    ),
    ("sunion", "key..."),
    ("sunionstore", "destination<key> key..."),
    // The IDSET family and its leases.
    ("idset.add", "key [XX] [SEQ seq<integer>] id<integer>..."),
    ("idset.card", "key"),
    ("idset.exists", "key id<integer>"),
    ("idset.info", "key"),
    (
        "idset.lease",
        "key [PX milliseconds<integer>] [BLOCK timeout<integer>]",
    ),
    (
        "idset.load",
        "key [expiration: EX seconds<integer> | PX milliseconds<integer>] [RESERVE ids<integer>] [LEASE token<integer>] [SEQ seq<integer>] (source: TABLE table | PACKED packed-ids | IDS id<integer>...)",
    ),
    ("idset.members", "key [PACKED]"),
    ("idset.mexists", "key id<integer>..."),
    (
        "idset.mexistsbin",
        "key packed-ids [LEASE lease: [PX milliseconds<integer>] [BLOCK timeout<integer>]]",
    ),
    ("idset.release", "key token<integer>"),
    ("idset.rem", "key [SEQ seq<integer>] id<integer>..."),
    ("idset.scan", "key cursor<integer> [COUNT count<integer>]"),
    ("idset.table", "key"),
    ("idset.which", "id<integer> key..."),
];

/// The `arguments` entry of `name`'s COMMAND DOCS: `None` when it takes none (Redis
/// then leaves the field out) or has no syntax line.
pub(super) fn arguments(name: &str) -> Option<Frame> {
    let (_, syntax) = SYNTAX.iter().find(|(n, _)| *n == name)?;
    let args = parse(syntax).expect("the syntax table parses (unit-tested)");
    (!args.is_empty()).then(|| Frame::Array(args.iter().map(Arg::to_frame).collect()))
}

/// Whether `name` has a syntax line (containers such as CLIENT have none: their
/// subcommands do).
#[cfg(test)]
fn has_syntax(name: &str) -> bool {
    SYNTAX.iter().any(|(n, _)| *n == name)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    String,
    Integer,
    Double,
    Key,
    Pattern,
    UnixTime,
    PureToken,
    OneOf,
    Block,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Integer => "integer",
            Kind::Double => "double",
            Kind::Key => "key",
            Kind::Pattern => "pattern",
            Kind::UnixTime => "unix-time",
            Kind::PureToken => "pure-token",
            Kind::OneOf => "oneof",
            Kind::Block => "block",
        }
    }

    fn from_name(s: &str) -> Option<Kind> {
        Some(match s {
            "string" => Kind::String,
            "integer" => Kind::Integer,
            "double" => Kind::Double,
            "key" => Kind::Key,
            "pattern" => Kind::Pattern,
            "unix-time" => Kind::UnixTime,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
struct Arg {
    name: String,
    kind: Kind,
    key_spec_index: Option<usize>,
    token: Option<String>,
    optional: bool,
    multiple: bool,
    /// Repeats with its token before each repetition (`PREFIX a PREFIX b`).
    multiple_token: bool,
    children: Vec<Arg>,
}

impl Arg {
    fn to_frame(&self) -> Frame {
        let bulk = |s: &str| Frame::Bulk(Bytes::copy_from_slice(s.as_bytes()));
        let mut fields = vec![
            (bulk("name"), bulk(&self.name)),
            (bulk("type"), bulk(self.kind.name())),
        ];
        if let Some(i) = self.key_spec_index {
            fields.push((bulk("key_spec_index"), Frame::Integer(i as i64)));
        }
        if let Some(t) = &self.token {
            fields.push((bulk("token"), bulk(t)));
        }
        let flags: Vec<Frame> = [
            (self.optional, "optional"),
            (self.multiple, "multiple"),
            (self.multiple_token, "multiple_token"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, f)| Frame::Simple(Bytes::from_static(f.as_bytes())))
        .collect();
        if !flags.is_empty() {
            fields.push((bulk("flags"), Frame::Set(flags)));
        }
        if !self.children.is_empty() {
            let children = self.children.iter().map(Arg::to_frame).collect();
            fields.push((bulk("arguments"), Frame::Array(children)));
        }
        Frame::Map(fields)
    }
}

/// Parses one syntax line into its arguments, numbering key arguments in order.
fn parse(syntax: &str) -> Result<Vec<Arg>, String> {
    let tokens = lex(syntax)?;
    let mut p = Parser {
        tokens: &tokens,
        pos: 0,
        keys: 0,
    };
    let args = p.sequence(&[])?;
    if p.pos != tokens.len() {
        return Err(format!("unexpected {:?}", tokens[p.pos]));
    }
    Ok(args)
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Open(char),
    Close(char),
    Bar,
    Ellipsis,
    /// `+...`: repeats, with its token each time.
    EachWithToken,
    /// A group's label, written `label:` before its contents.
    Label(String),
    Word(String),
}

fn lex(s: &str) -> Result<Vec<Tok>, String> {
    let mut out = Vec::new();
    for raw in s.split_whitespace() {
        let mut w = raw;
        while let Some(c) = w.chars().next().filter(|c| matches!(c, '[' | '(')) {
            out.push(Tok::Open(c));
            w = &w[1..];
        }
        // Closing brackets and ellipses, in the order written, come off the end.
        let mut tail = Vec::new();
        loop {
            if let Some(rest) = w.strip_suffix("+...") {
                tail.push(Tok::EachWithToken);
                w = rest;
            } else if let Some(rest) = w.strip_suffix("...") {
                tail.push(Tok::Ellipsis);
                w = rest;
            } else if let Some(c) = w.chars().last().filter(|c| matches!(c, ']' | ')')) {
                tail.push(Tok::Close(c));
                w = &w[..w.len() - 1];
            } else {
                break;
            }
        }
        match w {
            "" => {}
            "|" => out.push(Tok::Bar),
            _ => match w.strip_suffix(':') {
                Some(label) => out.push(Tok::Label(label.to_string())),
                None => out.push(Tok::Word(w.to_string())),
            },
        }
        out.extend(tail.into_iter().rev());
    }
    Ok(out)
}

struct Parser<'t> {
    tokens: &'t [Tok],
    pos: usize,
    keys: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    /// Items up to (not including) one of `stop` or the end.
    fn sequence(&mut self, stop: &[Tok]) -> Result<Vec<Arg>, String> {
        let mut items = Vec::new();
        while let Some(t) = self.peek() {
            if stop.contains(t) {
                break;
            }
            items.push(self.item()?);
        }
        Ok(items)
    }

    fn item(&mut self) -> Result<Arg, String> {
        let mut arg = match self.peek().cloned() {
            Some(Tok::Open(open)) => {
                self.pos += 1;
                let close = if open == '[' { ']' } else { ')' };
                let mut arg = self.group(close)?;
                arg.optional = open == '[';
                arg
            }
            Some(Tok::Word(w)) if w == "\"\"" => {
                self.pos += 1;
                Arg {
                    name: "empty_string".into(),
                    kind: Kind::PureToken,
                    key_spec_index: None,
                    // Redis 7.0 reports the token empty (7.2 quotes it).
                    token: Some(String::new()),
                    optional: false,
                    multiple: false,
                    multiple_token: false,
                    children: Vec::new(),
                }
            }
            Some(Tok::Word(w)) if is_token(&w) => {
                self.pos += 1;
                match self.peek().cloned() {
                    // `TOKEN name`: an argument introduced by the token.
                    Some(Tok::Word(next)) if !is_token(&next) => {
                        self.pos += 1;
                        let mut arg = self.plain(&next)?;
                        arg.token = Some(w);
                        arg
                    }
                    _ => Arg {
                        name: w.to_ascii_lowercase(),
                        kind: Kind::PureToken,
                        key_spec_index: None,
                        token: Some(w),
                        optional: false,
                        multiple: false,
                        multiple_token: false,
                        children: Vec::new(),
                    },
                }
            }
            Some(Tok::Word(w)) => {
                self.pos += 1;
                self.plain(&w)?
            }
            other => return Err(format!("unexpected {other:?}")),
        };
        if self.peek() == Some(&Tok::Ellipsis) {
            self.pos += 1;
            arg.multiple = true;
        } else if self.peek() == Some(&Tok::EachWithToken) {
            self.pos += 1;
            arg.multiple = true;
            arg.multiple_token = true;
        }
        Ok(arg)
    }

    /// The inside of a bracket, up to `close`: a single item (its own argument), or
    /// a labelled oneof or block, optionally introduced by a token.
    fn group(&mut self, close: char) -> Result<Arg, String> {
        let token = match (self.peek().cloned(), self.tokens.get(self.pos + 1)) {
            (Some(Tok::Word(w)), Some(Tok::Label(_))) if is_token(&w) => {
                self.pos += 1;
                Some(w)
            }
            _ => None,
        };
        let label = match self.peek().cloned() {
            Some(Tok::Label(l)) => {
                self.pos += 1;
                Some(l)
            }
            _ => None,
        };
        let end = [Tok::Close(close), Tok::Bar];
        let mut alternatives = vec![self.sequence(&end)?];
        while self.peek() == Some(&Tok::Bar) {
            self.pos += 1;
            alternatives.push(self.sequence(&end)?);
        }
        if self.peek() != Some(&Tok::Close(close)) {
            return Err(format!("missing '{close}'"));
        }
        self.pos += 1;
        let Some(name) = label else {
            return match <[Vec<Arg>; 1]>::try_from(alternatives) {
                Ok([mut one]) if one.len() == 1 => Ok(one.remove(0)),
                _ => Err("a group of several arguments needs a label".into()),
            };
        };
        let (kind, children) = if alternatives.len() > 1 {
            let mut children = Vec::new();
            for alt in alternatives {
                match <[Arg; 1]>::try_from(alt) {
                    Ok([a]) => children.push(a),
                    Err(_) => return Err(format!("alternative of '{name}' is not one argument")),
                }
            }
            (Kind::OneOf, children)
        } else {
            (Kind::Block, alternatives.remove(0))
        };
        Ok(Arg {
            name,
            kind,
            key_spec_index: None,
            token,
            optional: false,
            multiple: false,
            multiple_token: false,
            children,
        })
    }

    /// `name` or `name<type>`.
    fn plain(&mut self, word: &str) -> Result<Arg, String> {
        let (name, kind) = match word.strip_suffix('>').and_then(|w| w.split_once('<')) {
            Some((name, ty)) => (
                name,
                Kind::from_name(ty).ok_or_else(|| format!("unknown type '{ty}'"))?,
            ),
            None if word == "key" => (word, Kind::Key),
            None => (word, Kind::String),
        };
        let key_spec_index = (kind == Kind::Key).then(|| {
            self.keys += 1;
            self.keys - 1
        });
        Ok(Arg {
            name: name.to_string(),
            kind,
            key_spec_index,
            token: None,
            optional: false,
            multiple: false,
            multiple_token: false,
            children: Vec::new(),
        })
    }
}

/// Tokens are written in capitals (`NX`, `LIB-NAME`); argument names never are.
fn is_token(word: &str) -> bool {
    word.chars().any(|c| c.is_ascii_uppercase())
        && !word
            .chars()
            .any(|c| c.is_ascii_lowercase() || matches!(c, '<' | '>'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::registry;

    #[test]
    fn every_command_has_a_syntax_line_that_parses() {
        for spec in &registry().all {
            if !spec.subcommands.is_empty() {
                continue;
            }
            assert!(has_syntax(spec.name), "no syntax line for '{}'", spec.name);
        }
        for (name, syntax) in SYNTAX {
            assert!(
                registry().get(name.as_bytes()).is_some(),
                "syntax for unknown command '{name}'"
            );
            parse(syntax).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn shapes() {
        let set = parse("key value [condition: NX | XX] [GET] [EX seconds<integer>]").unwrap();
        assert_eq!(set.len(), 5);
        assert_eq!((set[0].kind, set[0].key_spec_index), (Kind::Key, Some(0)));
        assert_eq!(set[1].kind, Kind::String);
        let cond = &set[2];
        assert_eq!(
            (cond.kind, cond.optional, cond.children.len()),
            (Kind::OneOf, true, 2)
        );
        assert_eq!(cond.children[0].token.as_deref(), Some("NX"));
        assert_eq!(cond.children[0].name, "nx");
        assert_eq!((set[3].kind, set[3].optional), (Kind::PureToken, true));
        assert_eq!(set[4].token.as_deref(), Some("EX"));
        assert_eq!((set[4].kind, &set[4].name[..]), (Kind::Integer, "seconds"));

        let mset = parse("(key_value: key value)...").unwrap();
        assert_eq!((mset[0].kind, mset[0].multiple), (Kind::Block, true));
        assert!(!mset[0].optional);

        let list = parse("[ID id: client-id<integer>...]").unwrap();
        assert_eq!(list[0].token.as_deref(), Some("ID"));
        assert_eq!(list[0].kind, Kind::Block);
        assert!(list[0].children[0].multiple);

        let rename = parse("key newkey<key>").unwrap();
        assert_eq!(rename[1].key_spec_index, Some(1));

        assert!(parse("[a b]").is_err(), "a group of two needs a label");
        assert!(parse("[x: a | b c]").is_err());
        assert!(parse("(x: a").is_err());
        assert!(parse("a<nosuch>").is_err());
    }
}
