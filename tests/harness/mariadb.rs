//! A private MariaDB server for the relation tier's tests.
//!
//! [`MariaDb::start`] runs its own `mariadbd` on a free port, in a fresh data
//! directory, and polls it until it greets a client (never a fixed sleep). The data
//! directory is a copy of a template made once with `mariadb-install-db` and kept in
//! the temp dir between runs, so a start costs a copy and InnoDB's startup (well
//! under a second) rather than a bootstrap. [`shared`] hands every test of one binary
//! the same server — tests keep out of each other's way with distinct database
//! prefixes ([`db_prefix`]) — or the server in `MYSQL_URL` if that is set.
//!
//! Cleanup does not depend on destructors running: each `mariadbd` is started by a
//! small `sh` watchdog that reads its stdin, a pipe from the test process. When the
//! test process exits — normally, by panic, or killed — the pipe closes, and the
//! watchdog kills the server and removes its directory. (The shared server lives in a
//! static, which Rust never drops.) Directories left by a watchdog that was itself
//! killed are swept by the next run.
//!
//! A missing `mariadbd` is a loud failure, never a skip: `scripts/test.sh` installs it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use relcache_relation::{schema, ShardMap, Store, StoreConfig};

/// Bumped when the template's bootstrap options change, so an old template in the
/// temp dir is not reused.
const TEMPLATE_REV: u32 = 1;

/// Options shared by the bootstrap and the server: small, fast, not durable across
/// an OS crash (which tests do not simulate; a process kill loses nothing).
const INNODB_OPTS: &[&str] = &[
    "--innodb-buffer-pool-size=64M",
    "--innodb-log-file-size=16M",
    "--innodb-flush-log-at-trx-commit=2",
    "--innodb-doublewrite=0",
    "--innodb-use-native-aio=0",
];

/// Kills the server when its stdin closes or says anything; removes the directory
/// unless told `keep` (a simulated crash, to be restarted on the same data).
const WATCHDOG: &str = r#"
dir="$1"; shift
"$@" </dev/null >/dev/null 2>&1 &
pid=$!
echo "$pid"
read -r cmd
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ "$cmd" = keep ] || rm -rf "$dir"
"#;

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A MariaDB server for tests: one this process started, or the one in `MYSQL_URL`.
pub struct MariaDb {
    url: String,
    local: Option<Local>,
}

struct Local {
    dir: PathBuf,
    port: u16,
    /// The watchdog and its stdin; `None` after [`MariaDb::kill`].
    watchdog: Option<(Child, ChildStdin)>,
    /// The mariadbd process id.
    pid: u32,
}

impl MariaDb {
    /// Starts a private server. Panics (with what to do) if MariaDB is not installed
    /// or the server does not come up.
    pub fn start() -> MariaDb {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = process_dir().join(format!("i{}", NEXT.fetch_add(1, Ordering::Relaxed)));
        std::fs::create_dir_all(&dir).expect("create MariaDB instance dir");
        let status = Command::new("cp")
            .arg("-a")
            .arg(template())
            .arg(dir.join("data"))
            .status()
            .expect("run cp");
        assert!(status.success(), "copying the MariaDB template failed");
        // A port chosen by the kernel can be taken again before mariadbd binds it;
        // a failed bind shows in the log and gets another port. Within this process
        // starts take turns: two could otherwise be handed one free port, and the
        // one that fails to bind it would find the other answering there and take
        // it for its own.
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 0..3 {
            let port = free_port();
            let mut local = Local {
                dir: dir.clone(),
                port,
                watchdog: None,
                pid: 0,
            };
            local.spawn();
            match local.wait_ready() {
                Ok(()) => {
                    return MariaDb {
                        url: format!("mysql://root@127.0.0.1:{port}"),
                        local: Some(local),
                    }
                }
                Err(log) if attempt < 2 && log.contains("Address already in use") => {
                    local.stop_keeping_dir();
                }
                Err(log) => panic!("mariadbd did not start:\n{log}"),
            }
        }
        unreachable!()
    }

    /// `mysql://root@127.0.0.1:PORT`, no database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Kills the server with SIGKILL, as a crash would; its data stays for
    /// [`restart`](Self::restart).
    pub fn kill(&mut self) {
        self.local_mut("kill").stop_keeping_dir();
    }

    /// Starts the server again on the same data directory and port, after
    /// [`kill`](Self::kill), and waits until it accepts connections (InnoDB crash
    /// recovery included).
    pub fn restart(&mut self) {
        let local = self.local_mut("restart");
        assert!(local.watchdog.is_none(), "restart() without kill()");
        local.spawn();
        if let Err(log) = local.wait_ready() {
            panic!("mariadbd did not restart:\n{log}");
        }
    }

    /// Stops the server process (SIGSTOP) without closing its sockets: connections
    /// and queries hang, as with a wedged host. [`resume`](Self::resume) undoes it.
    ///
    /// Returns once every thread of the server has stopped: the kernel stops them
    /// one by one as each next leaves the kernel, and a thread busy with a disk
    /// write may yet answer a query that arrives meanwhile.
    pub fn pause(&mut self) {
        let pid = self.local_mut("pause").pid;
        signal("STOP", pid);
        let deadline = Instant::now() + START_TIMEOUT;
        while !all_threads_stopped(pid) {
            assert!(Instant::now() < deadline, "mariadbd {pid} never stopped");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Continues a [`pause`](Self::pause)d server.
    pub fn resume(&mut self) {
        let pid = self.local_mut("resume").pid;
        signal("CONT", pid);
    }

    fn local_mut(&mut self, what: &str) -> &mut Local {
        self.local.as_mut().unwrap_or_else(|| {
            panic!("{what}() needs a server started by the harness, not MYSQL_URL")
        })
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        if let Some(mut local) = self.local.take() {
            match local.watchdog.take() {
                // EOF on its stdin: the watchdog kills the server, removes the dir.
                Some((mut child, stdin)) => {
                    drop(stdin);
                    let _ = child.wait();
                }
                None => {
                    let _ = std::fs::remove_dir_all(&local.dir);
                }
            }
        }
    }
}

impl Local {
    fn spawn(&mut self) {
        let data = self.dir.join("data");
        let mut args: Vec<String> = vec![
            "--no-defaults".into(),
            format!("--datadir={}", data.display()),
            format!("--socket={}", self.dir.join("mysqld.sock").display()),
            format!("--pid-file={}", self.dir.join("mysqld.pid").display()),
            format!("--log-error={}", self.dir.join("error.log").display()),
            format!("--tmpdir={}", self.dir.display()),
            format!("--port={}", self.port),
            "--bind-address=127.0.0.1".into(),
            "--skip-name-resolve".into(),
            "--skip-log-bin".into(),
            "--max-connections=1000".into(),
        ];
        args.extend(INNODB_OPTS.iter().map(|s| s.to_string()));
        if let Some(user) = user_flag() {
            args.push(user);
        }
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("sh")
            .arg(&self.dir)
            .arg(mariadbd())
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the MariaDB watchdog shell");
        let stdin = child.stdin.take().expect("piped stdin");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("read mariadbd's pid from the watchdog");
        self.pid = line.trim().parse().expect("watchdog prints the pid");
        self.watchdog = Some((child, stdin));
    }

    /// Polls until the server sends a protocol-10 greeting. Err: the log.
    fn wait_ready(&self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if greets(self.port) {
                return Ok(());
            }
            if !alive(self.pid) || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("error.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(tail.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Tells the watchdog to kill the server but keep the data; waits for it.
    fn stop_keeping_dir(&mut self) {
        if let Some((mut child, mut stdin)) = self.watchdog.take() {
            let _ = stdin.write_all(b"keep\n");
            drop(stdin);
            let _ = child.wait();
        }
    }
}

/// The server every test in this binary shares: `MYSQL_URL` if set, else one
/// private server started on first use.
pub fn shared() -> &'static MariaDb {
    static SHARED: OnceLock<MariaDb> = OnceLock::new();
    SHARED.get_or_init(|| match std::env::var("MYSQL_URL") {
        Ok(url) if !url.is_empty() => MariaDb { url, local: None },
        _ => MariaDb::start(),
    })
}

/// A database-name prefix unique to this test and this process, so tests sharing a
/// server (and runs sharing a `MYSQL_URL` server) never see each other's rows.
pub fn db_prefix(test: &str) -> String {
    format!("rc{}_{test}_s", std::process::id())
}

/// The `mariadbd` binary; panics with the fix if it is missing.
fn mariadbd() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        find_tool("mariadbd").unwrap_or_else(|| {
            panic!(
                "mariadbd is not installed: run ./scripts/test.sh (it installs \
                 mariadb-server) or apt-get install mariadb-server"
            )
        })
    })
}

fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// `<tmp>/relcache-mariadb`, holding templates and one `proc-<pid>` dir per test
/// process. The first call removes the dirs of processes that are gone.
fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let root = std::env::temp_dir().join("relcache-mariadb");
        std::fs::create_dir_all(&root).expect("create the MariaDB test root");
        for entry in std::fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("proc-")) else {
                continue;
            };
            if pid
                .parse()
                .is_ok_and(|pid: u32| !Path::new(&format!("/proc/{pid}")).exists())
            {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        root
    })
}

fn process_dir() -> PathBuf {
    root().join(format!("proc-{}", std::process::id()))
}

/// A bootstrapped data directory to copy, made once per MariaDB version and kept.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let version = Command::new(mariadbd())
            .arg("--version")
            .output()
            .expect("run mariadbd --version");
        let version: String = String::from_utf8_lossy(&version.stdout)
            .split_whitespace()
            .nth(2)
            .unwrap_or("unknown")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let template = root().join(format!("template-{version}-r{TEMPLATE_REV}"));
        if template.join("mysql").is_dir() {
            return template;
        }
        // Bootstrap privately, then rename into place: the rename is atomic, and a
        // concurrent test binary that got there first simply wins.
        let tmp = process_dir().join("template");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(process_dir()).expect("create the process dir");
        let install = find_tool("mariadb-install-db").unwrap_or_else(|| {
            panic!("mariadb-install-db is not installed: run ./scripts/test.sh")
        });
        let mut cmd = Command::new(install);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", tmp.display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .args(INNODB_OPTS);
        if let Some(user) = user_flag() {
            cmd.arg(user);
        }
        let out = cmd.output().expect("run mariadb-install-db");
        assert!(
            out.status.success(),
            "mariadb-install-db failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if std::fs::rename(&tmp, &template).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            assert!(template.join("mysql").is_dir(), "MariaDB template missing");
        }
        template
    })
}

/// `--user=root` when running as root (mariadbd refuses root without it); nothing
/// otherwise (it runs as whoever started it).
fn user_flag() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .to_string();
    (uid == "0").then(|| "--user=root".to_string())
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// Whether a server on `port` answers with a MySQL protocol-10 handshake.
fn greets(port: u16) -> bool {
    let addr = (Ipv4Addr::LOCALHOST, port).into();
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    // 3-byte length, sequence id, then the payload, whose first byte is the
    // protocol version (10) — or 0xff for an error packet ("too many connections").
    let mut head = [0u8; 5];
    s.read_exact(&mut head).is_ok() && head[4] == 10
}

/// Whether every thread of process `pid` is stopped by a signal (state `T`).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|task| {
        std::fs::read_to_string(task.path().join("stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                == Some("T")
        })
    })
}

/// Whether a process is running (not gone, not a zombie waiting for its parent).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .next()?
                .to_string();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

fn signal(sig: &str, pid: u32) {
    let status = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{sig} {pid} failed");
}

// ---- For the relation tier's tests (tests/relation_*.rs). ----

/// A [`Store`] over `shards` logical shards on `url`, in databases named for `test`
/// (see [`db_prefix`]), with the schema created. `configure` adjusts the defaults.
pub async fn relation_store(
    url: &str,
    test: &str,
    shards: u32,
    configure: impl FnOnce(&mut StoreConfig),
) -> Store {
    let map = ShardMap::single_host(url, &db_prefix(test), shards).expect("shard map");
    let mut config = StoreConfig::new(map);
    configure(&mut config);
    let store = Store::new(config);
    schema::create_all(&store).await.expect("create the schema");
    store
}

/// Plain SQL on a store's shards, behind the store's back: to check rows it wrote
/// and to break them on purpose.
pub struct RawSql {
    pool: mysql_async::Pool,
    map: ShardMap,
}

impl RawSql {
    pub fn new(store: &Store) -> RawSql {
        let map = store.shards().clone();
        let pool = mysql_async::Pool::new(map.host(0).url());
        RawSql { pool, map }
    }

    /// `sql` with `{db}` replaced by the quoted database of `shard`.
    fn on(&self, shard: u32, sql: &str) -> String {
        sql.replace("{db}", &format!("`{}`", self.map.database(shard)))
    }

    /// Runs a statement on `shard`; answers the rows it affected.
    pub async fn exec(
        &self,
        shard: u32,
        sql: &str,
        params: impl Into<mysql_async::Params> + Send,
    ) -> u64 {
        use mysql_async::prelude::Queryable;
        let mut conn = self.pool.get_conn().await.expect("raw connection");
        conn.exec_drop(self.on(shard, sql), params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        conn.affected_rows()
    }

    /// Runs a query on `shard`.
    pub async fn query<T: mysql_async::prelude::FromRow + Send + 'static>(
        &self,
        shard: u32,
        sql: &str,
        params: impl Into<mysql_async::Params> + Send,
    ) -> Vec<T> {
        use mysql_async::prelude::Queryable;
        let mut conn = self.pool.get_conn().await.expect("raw connection");
        conn.exec(self.on(shard, sql), params)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `(mutual, auto_ts)` of `table`'s row `(user, friend)`, read on `user`'s shard.
    pub async fn row(&self, table: &str, user: u64, friend: u64) -> Option<(bool, u64)> {
        let sql = format!(
            "SELECT mutual, auto_ts FROM {{db}}.{table} WHERE user_id = ? AND friend_id = ?"
        );
        self.query(self.map.shard_of(user), &sql, (user, friend))
            .await
            .into_iter()
            .next()
    }

    /// The four rows of the pair: following(a, b), followers(b, a), following(b, a),
    /// followers(a, b).
    pub async fn pair(&self, a: u64, b: u64) -> [Option<(bool, u64)>; 4] {
        [
            self.row("following", a, b).await,
            self.row("followers", b, a).await,
            self.row("following", b, a).await,
            self.row("followers", a, b).await,
        ]
    }

    /// The shard map.
    pub fn map(&self) -> &ShardMap {
        &self.map
    }
}
