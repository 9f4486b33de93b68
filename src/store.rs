//! The store: one SQLite database in WAL mode (default `.ksearch/ksearch.db`). Only this module writes
//! it. Every finished evaluation is committed on its own before the next one starts, so a run killed at
//! any moment (kill -9 included) loses at most the evaluation in flight, and `resume` reuses the rest.

use crate::candidate::Candidate;
use crate::clock::now;
use crate::eval::{Summary, WorkloadResult};
use crate::run_result::RunResult;
pub use crate::run_result::{Phase, RunStatus};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {}: {source}{}", path.display(), hint(source))]
    Sql {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("store {}: {message}", path.display())]
    Other { path: PathBuf, message: String },
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// The store's schema version (SQLite's `user_version`). A store of an older version is migrated when it is
/// opened for writing (`migrate`); one of a newer version is refused, never half understood.
pub const SCHEMA_VERSION: i64 = 1;

/// The run values kept as text (`run_result::RunStatus`, `Phase`) read and written by their one spelling.
macro_rules! stored_as_text {
    ($($name:ident),+) => {$(
        impl rusqlite::types::ToSql for $name {
            fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
                Ok(self.as_str().into())
            }
        }

        impl rusqlite::types::FromSql for $name {
            fn column_result(v: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
                let t = v.as_str()?;
                $name::parse(t).ok_or_else(|| {
                    rusqlite::types::FromSqlError::Other(
                        format!("`{t}` is no {} this ksearch knows", stringify!($name)).into(),
                    )
                })
            }
        }
    )+};
}
stored_as_text!(RunStatus, Phase);

/// What to do about the SQLite errors a user can meet.
fn hint(e: &rusqlite::Error) -> String {
    use rusqlite::ErrorCode::*;
    let code = match e {
        rusqlite::Error::SqliteFailure(f, _) => f.code,
        _ => return String::new(),
    };
    match code {
        DatabaseBusy | DatabaseLocked => format!(
            " — another process holds the store locked (this one waits up to {} ms, KSEARCH_STORE_BUSY_MS); \
             wait for it or use another --store; nothing finished is lost",
            busy_ms()
        ),
        DatabaseCorrupt | NotADatabase => DAMAGED.into(),
        DiskFull => " — the disk holding the store is full: free space, then `ksearch resume RUN`; every finished evaluation is kept".into(),
        ReadOnly | CannotOpen | PermissionDenied => " — the store cannot be written here: check the folder's permissions, or pass --store DIR".into(),
        _ => String::new(),
    }
}

/// What to do about a damaged store file.
const DAMAGED: &str = " — the store file is damaged: move ksearch.db aside (what is readable can be saved with \
     `sqlite3 ksearch.db .recover > dump.sql`) and start a new store, or pass --store DIR; ksearch writes \
     nothing more into a damaged file";

/// How long to wait for another process's lock on the store.
fn busy_ms() -> u64 {
    std::env::var("KSEARCH_STORE_BUSY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000)
}

pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// With `KSEARCH_STORE_HOLDS` set: the longest this process held the write lock (see `watch_holds`).
    holds: Option<Holds>,
}

/// The longest write-lock hold seen on a connection: its length and the statement that ended it.
type Holds = std::sync::Arc<std::sync::Mutex<(Duration, String)>>;

/// Measures how long this connection holds the store's write lock, for `KSEARCH_STORE_HOLDS` (a test runs
/// two searches on one store and reads the longest hold each printed): an explicit transaction from its
/// BEGIN to its COMMIT or ROLLBACK, any other writing statement for its own run time. No transaction may
/// stay open across an evaluation, a worker request or an LLM call; this shows that none does.
fn watch_holds(conn: &mut Connection) -> Option<Holds> {
    std::env::var_os("KSEARCH_STORE_HOLDS")?;
    let holds: Holds = Default::default();
    let seen = holds.clone();
    let mut begun: Option<std::time::Instant> = None;
    let result = conn.trace_v2(
        rusqlite::trace::TraceEventCodes::SQLITE_TRACE_PROFILE,
        Some(move |e: rusqlite::trace::TraceEvent<'_>| {
            let rusqlite::trace::TraceEvent::Profile(stmt, took) = e else {
                return;
            };
            let sql = stmt.sql();
            let head = sql.trim_start().to_ascii_uppercase();
            let now = std::time::Instant::now();
            let hold = if head.starts_with("BEGIN") {
                begun = Some(now - took);
                None
            } else if head.starts_with("COMMIT")
                || head.starts_with("ROLLBACK")
                || head.starts_with("END")
            {
                begun.take().map(|b| now - b)
            } else if begun.is_none()
                && ["INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "VACUUM"]
                    .iter()
                    .any(|w| head.starts_with(w))
            {
                Some(took)
            } else {
                None
            };
            if let Some(h) = hold {
                let mut longest = seen.lock().unwrap_or_else(|p| p.into_inner());
                if h > longest.0 {
                    *longest = (
                        h,
                        sql.split_whitespace().take(6).collect::<Vec<_>>().join(" "),
                    );
                }
            }
        }),
    );
    result.ok().map(|_| holds)
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Some(h) = &self.holds {
            let (longest, sql) = &*h.lock().unwrap_or_else(|p| p.into_inner());
            eprintln!(
                "ksearch-store: longest write hold {:.3} ms ({sql})",
                longest.as_secs_f64() * 1e3
            );
        }
    }
}

/// A run as listed by `ksearch runs`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunRow {
    pub run_id: String,
    pub task: String,
    pub task_dir: String,
    pub target: String,
    pub strategy: String,
    pub budget: i64,
    pub status: RunStatus,
    pub evaluations: i64,
    pub created_at: f64,
    pub updated_at: f64,
    pub pid: Option<i64>,
    pub config: Value,
    /// The worker's hello for the run (its hardware, compiler and sandbox); `RunRow::hardware` reads it.
    pub hello: Value,
    /// None while the run has not finished (or a stored result does not read).
    pub result: Option<RunResult>,
    pub error: Option<String>,
}

impl RunRow {
    /// The device the run measured on (empty before its worker said hello).
    pub fn hardware(&self) -> crate::eval::Hardware {
        crate::eval::Hardware::from_hello(&self.hello)
    }
}

/// One candidate evaluated in a run (the unit of the budget).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Attempt {
    pub seq: i64,
    pub phase: Phase,
    pub candidate: String,
    pub parent: Option<String>,
    pub origin: String,
    pub finished: bool,
    pub summary: Option<Summary>,
    /// Unix times it began and finished (None for an attempt still in progress).
    pub started_at: Option<f64>,
    pub finished_at: Option<f64>,
}

/// The SQL condition on `hash` (a candidate's, or `?1`) that no run refers to it: no attempt evaluates it or
/// builds on it, no evaluation is of it, no run starts from it.
const ORPHANED: &str = "hash NOT IN (SELECT candidate FROM attempts)
    AND hash NOT IN (SELECT parent FROM attempts WHERE parent IS NOT NULL)
    AND hash NOT IN (SELECT candidate FROM evaluations)
    AND hash NOT IN (SELECT json_extract(config, '$.seed_candidate') FROM runs
                     WHERE json_valid(config) AND json_extract(config, '$.seed_candidate') IS NOT NULL)";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runs(
    run_id TEXT PRIMARY KEY, task TEXT NOT NULL, task_dir TEXT NOT NULL, target TEXT NOT NULL,
    strategy TEXT NOT NULL, budget INTEGER NOT NULL, status TEXT NOT NULL,
    config TEXT NOT NULL, hardware TEXT, result TEXT, error TEXT,
    pid INTEGER, created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS candidates(
    hash TEXT PRIMARY KEY, name TEXT NOT NULL, target TEXT NOT NULL, source TEXT NOT NULL,
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS attempts(
    run_id TEXT NOT NULL REFERENCES runs(run_id), phase TEXT NOT NULL, seq INTEGER NOT NULL,
    candidate TEXT NOT NULL REFERENCES candidates(hash), parent TEXT, origin TEXT NOT NULL,
    finished INTEGER NOT NULL DEFAULT 0, summary TEXT, started_at REAL NOT NULL, finished_at REAL,
    PRIMARY KEY(run_id, phase, seq));
CREATE TABLE IF NOT EXISTS evaluations(
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL REFERENCES runs(run_id),
    phase TEXT NOT NULL, candidate TEXT NOT NULL, workload TEXT NOT NULL, status TEXT NOT NULL,
    median_s REAL, result TEXT NOT NULL, created_at REAL NOT NULL,
    UNIQUE(run_id, phase, candidate, workload));
CREATE TABLE IF NOT EXISTS strategy_state(
    run_id TEXT PRIMARY KEY REFERENCES runs(run_id), state TEXT NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS llm_exchanges(
    run_id TEXT NOT NULL REFERENCES runs(run_id), seq INTEGER NOT NULL, purpose TEXT NOT NULL,
    provider TEXT NOT NULL, model TEXT NOT NULL, outcome TEXT NOT NULL, exchange TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY(run_id, seq));
CREATE TABLE IF NOT EXISTS wm_snapshots(
    run_id TEXT NOT NULL REFERENCES runs(run_id), idx INTEGER NOT NULL, tree TEXT NOT NULL,
    created_at REAL NOT NULL, PRIMARY KEY(run_id, idx));
";

/// `--store DIR`, else `KSEARCH_STORE`, else `.ksearch` in the working directory.
pub fn default_dir(flag: Option<&Path>) -> PathBuf {
    flag.map(Path::to_path_buf)
        .or_else(|| std::env::var_os("KSEARCH_STORE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(".ksearch"))
}

impl Store {
    pub fn open(dir: &Path) -> Result<Store> {
        let path = dir.join("ksearch.db");
        let wrap = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|e| StoreError::Other {
            path: path.clone(),
            message: format!("cannot create the store folder: {e}"),
        })?;
        // Turning a new database to WAL and creating the schema meet locks SQLite does not wait for: a
        // process reading the schema while another converts the journal fails at once, whatever the busy
        // timeout (seen with two runs started together on a fresh store). One process at a time opens,
        // under a file lock beside the database; later statements are short and wait on the busy timeout.
        // A folder that cannot hold the lock file (read-only) is opened without it.
        let guard = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("ksearch.db.open-lock"))
            .ok()
            .filter(|f| f.lock().is_ok());
        let conn = Connection::open(&path).map_err(wrap)?;
        // Another run or a reader may hold the lock briefly; wait rather than fail.
        conn.busy_timeout(Duration::from_millis(busy_ms()))
            .map_err(wrap)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(wrap)?;
        if mode.to_lowercase() != "wal" {
            return Err(StoreError::Other {
                path,
                message: format!("cannot switch to WAL mode (got `{mode}`)"),
            });
        }
        conn.execute_batch("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;")
            .map_err(wrap)?;
        // A newer store is refused before anything is written into it.
        let version = schema_version(&conn).map_err(wrap)?;
        if version > SCHEMA_VERSION {
            return Err(newer(&path, version));
        }
        conn.execute_batch(SCHEMA).map_err(wrap)?;
        migrate(&conn, &path)?;
        drop(guard);
        let mut conn = conn;
        let holds = watch_holds(&mut conn);
        let store = Store { conn, path, holds };
        store.check_health()?;
        Ok(store)
    }

    /// For commands that only read (`runs`, `show`, `compare`, `export`, `doctor`): opened read-only and
    /// never created, so a store the user may read but not write (a shared results folder, a read-only
    /// disk) can be listed and shown. `Ok(None)`: there is no store in `dir`.
    pub fn open_read(dir: &Path) -> Result<Option<Store>> {
        let path = dir.join("ksearch.db");
        if !path.is_file() {
            return Ok(None);
        }
        let wrap = |source| StoreError::Sql {
            path: path.clone(),
            source,
        };
        // A writer opening the store (turning it to WAL, making the schema) holds this lock: wait for it.
        let _opening = std::fs::File::open(dir.join("ksearch.db.open-lock"))
            .ok()
            .filter(|f| f.lock_shared().is_ok());
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&path, flags).map_err(wrap)?;
        conn.busy_timeout(Duration::from_millis(busy_ms()))
            .map_err(wrap)?;
        let store = Store {
            conn,
            path,
            holds: None,
        };
        // Older stores read as they are (their values parse alike); a newer one is refused, on whichever
        // connection reads it.
        let known = |store: Store| -> Result<Option<Store>> {
            let v = schema_version(&store.conn).map_err(|e| store.sql(e))?;
            if v > SCHEMA_VERSION {
                return Err(newer(&store.path, v));
            }
            Ok(Some(store))
        };
        match store.check_health() {
            Ok(()) => known(store),
            // A WAL database is read through a shared-memory file beside it, which a folder we may not
            // write cannot hold. With no write-ahead log beside it, no writer is at work and every change is
            // in the main file: read it as immutable (no locks, no log).
            Err(StoreError::Sql {
                source: rusqlite::Error::SqliteFailure(f, _),
                ..
            }) if matches!(
                f.code,
                rusqlite::ErrorCode::ReadOnly | rusqlite::ErrorCode::CannotOpen
            ) && !dir.join("ksearch.db-wal").exists() =>
            {
                let path = store.path.clone();
                drop(store);
                let uri = format!("file:{}?immutable=1", uri_path(&path));
                let conn = Connection::open_with_flags(&uri, flags | OpenFlags::SQLITE_OPEN_URI)
                    .map_err(|source| StoreError::Sql {
                        path: path.clone(),
                        source,
                    })?;
                let store = Store {
                    conn,
                    path,
                    holds: None,
                };
                store.check_health()?;
                known(store)
            }
            Err(e) => Err(e),
        }
    }

    /// `open_read`, with a missing store as an error that says what to do.
    pub fn open_existing(dir: &Path) -> Result<Store> {
        Store::open_read(dir)?.ok_or_else(|| StoreError::Other {
            path: dir.join("ksearch.db"),
            message: "no store here: nothing has run with it yet (`ksearch run` creates it); pass \
                      --store DIR or set KSEARCH_STORE to read another"
                .into(),
        })
    }

    /// Damage in the middle of the file is otherwise met only by the statement that reads it, and new
    /// runs would be written into the damaged file: checked at open (it reads every page, without the
    /// index cross-checks of a full integrity check).
    fn check_health(&self) -> Result<()> {
        let health: Vec<String> = self
            .conn
            .prepare("PRAGMA quick_check(5)")
            .and_then(|mut s| {
                s.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
            .map_err(|e| self.sql(e))?;
        if health != ["ok"] {
            return Err(StoreError::Other {
                path: self.path.clone(),
                message: format!("integrity check failed ({}){DAMAGED}", health.join("; ")),
            });
        }
        Ok(())
    }

    /// Candidates no run refers to any more (left by `runs rm`): their hashes and stored sizes. A run's seed
    /// counts as referred to from the start (its first attempt may begin minutes later, after the worker's
    /// environment is built); while a run is in progress, only candidates stored over an hour ago go (a run
    /// stores a candidate just before the attempt that refers to it, and storing one again renews it).
    pub fn orphaned_candidates(&self) -> Result<Vec<(String, u64)>> {
        let cutoff = if self.any_run_in_progress()? {
            now() - 3600.0
        } else {
            f64::INFINITY
        };
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT hash, length(source) FROM candidates WHERE created_at < ?1 AND {ORPHANED} ORDER BY hash"
            ))
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map(params![cutoff], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64))
            })
            .and_then(|rows| rows.collect::<std::result::Result<Vec<_>, _>>())
            .map_err(|e| self.sql(e))?;
        Ok(rows)
    }

    /// Deletes the candidates `orphaned_candidates` named, if still orphaned (checked again inside the
    /// write transaction), then gives the freed pages back to the file system when no run is in progress.
    /// Returns those deleted.
    pub fn remove_orphaned_candidates(&self, hashes: &[String]) -> Result<Vec<String>> {
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(|e| self.sql(e))?;
        let mut removed = Vec::new();
        for h in hashes {
            if tx
                .execute(
                    &format!("DELETE FROM candidates WHERE hash=?1 AND {ORPHANED}"),
                    params![h],
                )
                .map_err(|e| self.sql(e))?
                > 0
            {
                removed.push(h.clone());
            }
        }
        tx.commit().map_err(|e| self.sql(e))?;
        if !removed.is_empty() && !self.any_run_in_progress()? {
            self.conn
                .execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);")
                .map_err(|e| self.sql(e))?;
        }
        Ok(removed)
    }

    /// Whether a live process is working on any run (status `running`, its pid alive).
    fn any_run_in_progress(&self) -> Result<bool> {
        let pids: Vec<i64> = self
            .conn
            .prepare("SELECT pid FROM runs WHERE status='running' AND pid IS NOT NULL")
            .and_then(|mut s| {
                s.query_map([], |r| r.get::<_, i64>(0))?
                    .collect::<std::result::Result<Vec<_>, _>>()
            })
            .map_err(|e| self.sql(e))?;
        Ok(pids.into_iter().any(process_alive))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sql {
            path: self.path.clone(),
            source,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub fn create_run(
        &self,
        run_id: &str,
        task: &str,
        task_dir: &Path,
        target: &str,
        strategy: &str,
        budget: i64,
        config: &Value,
    ) -> Result<()> {
        let t = now();
        self.conn
            .execute(
                "INSERT INTO runs(run_id, task, task_dir, target, strategy, budget, status, config, pid, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'running', ?7, ?8, ?9, ?9)",
                params![
                    run_id,
                    task,
                    task_dir.to_string_lossy(),
                    target,
                    strategy,
                    budget,
                    config.to_string(),
                    std::process::id() as i64,
                    t
                ],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// Marks a run as being worked on by this process: the run's lease. Refused, naming the holder, while
    /// another live process holds it; the check and the claim are one write transaction, so of two
    /// `resume`s started together exactly one gets the run.
    pub fn claim_run(&self, run_id: &str) -> Result<()> {
        let me = std::process::id() as i64;
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(|e| self.sql(e))?;
        if let Some(pid) = self.live_holder(&tx, run_id)?
            && pid != me
        {
            return Err(StoreError::Other {
                path: self.path.clone(),
                message: format!(
                    "run {run_id} is being worked on by process {pid}; wait for it or stop it first"
                ),
            });
        }
        tx.execute(
            "UPDATE runs SET status='running', pid=?2, error=NULL, updated_at=?3 WHERE run_id=?1",
            params![run_id, me, now()],
        )
        .map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// The live process holding a run's lease (status `running`, its pid alive), read inside `tx`.
    fn live_holder(&self, tx: &rusqlite::Transaction<'_>, run_id: &str) -> Result<Option<i64>> {
        let holder: Option<(RunStatus, Option<i64>)> = tx
            .query_row(
                "SELECT status, pid FROM runs WHERE run_id=?1",
                params![run_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        Ok(match holder {
            Some((RunStatus::Running, Some(pid))) if process_alive(pid) => Some(pid),
            _ => None,
        })
    }

    /// Gives the lease back with the status and error the run had before it was claimed (a `resume` that
    /// failed before doing anything leaves a finished run as it was). Only by the process holding it.
    pub fn release_run(&self, run_id: &str, status: RunStatus, error: Option<&str>) -> Result<()> {
        self.conn
            .execute(
                "UPDATE runs SET status=?2, error=?3, pid=NULL, updated_at=?4 WHERE run_id=?1 AND pid=?5",
                params![run_id, status, error, now(), std::process::id() as i64],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// The run a user names: its id, `last` (the run created most recently), or a prefix of one id.
    pub fn resolve_run(&self, name: &str) -> Result<String> {
        let runs = self.runs()?;
        if runs.iter().any(|r| r.run_id == name) {
            return Ok(name.to_string());
        }
        if name == "last"
            && let Some(r) = runs.last()
        {
            return Ok(r.run_id.clone());
        }
        let matching: Vec<&str> = runs
            .iter()
            .map(|r| r.run_id.as_str())
            .filter(|id| !name.is_empty() && id.starts_with(name))
            .collect();
        match matching.as_slice() {
            [one] => Ok(one.to_string()),
            [] => Err(StoreError::Other {
                path: self.path.clone(),
                message: format!("no run `{name}`; `ksearch runs` lists them"),
            }),
            many => Err(StoreError::Other {
                path: self.path.clone(),
                message: format!(
                    "`{name}` names {} runs ({}{}); give more of the id",
                    many.len(),
                    many[..many.len().min(5)].join(", "),
                    if many.len() > 5 { ", …" } else { "" }
                ),
            }),
        }
    }

    /// Deletes a run and everything stored for it (its candidates stay: other runs may share them).
    /// Refused while a live process works on it.
    pub fn remove_run(&self, run_id: &str) -> Result<()> {
        let tx = rusqlite::Transaction::new_unchecked(
            &self.conn,
            rusqlite::TransactionBehavior::Immediate,
        )
        .map_err(|e| self.sql(e))?;
        // Checked inside the write transaction: a `resume` cannot claim the run in between.
        if let Some(pid) = self.live_holder(&tx, run_id)? {
            return Err(StoreError::Other {
                path: self.path.clone(),
                message: format!("run {run_id} is being worked on by process {pid}; stop it first"),
            });
        }
        for table in [
            "attempts",
            "evaluations",
            "strategy_state",
            "llm_exchanges",
            "wm_snapshots",
            "runs",
        ] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE run_id=?1"),
                params![run_id],
            )
            .map_err(|e| self.sql(e))?;
        }
        tx.commit().map_err(|e| self.sql(e))
    }

    /// Removes a run nothing of which started (no attempt, exchange or state stored): a run whose
    /// evaluator could not start (Python, the target, the task's reference) leaves no empty run behind.
    /// Whether it was removed.
    pub fn forget_unstarted_run(&self, run_id: &str) -> Result<bool> {
        let n = self
            .conn
            .execute(
                "DELETE FROM runs WHERE run_id=?1
                   AND NOT EXISTS (SELECT 1 FROM attempts WHERE run_id=?1)
                   AND NOT EXISTS (SELECT 1 FROM evaluations WHERE run_id=?1)
                   AND NOT EXISTS (SELECT 1 FROM llm_exchanges WHERE run_id=?1)
                   AND NOT EXISTS (SELECT 1 FROM strategy_state WHERE run_id=?1)",
                params![run_id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(n > 0)
    }

    pub fn set_hello(&self, run_id: &str, hw: &Value) -> Result<()> {
        self.conn
            .execute(
                "UPDATE runs SET hardware=?2, updated_at=?3 WHERE run_id=?1",
                params![run_id, hw.to_string(), now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn finish_run(
        &self,
        run_id: &str,
        status: RunStatus,
        result: &RunResult,
        error: Option<&str>,
    ) -> Result<()> {
        let result = serde_json::to_string(result).expect("a result serialises");
        self.conn
            .execute(
                "UPDATE runs SET status=?2, result=?3, error=?4, pid=NULL, updated_at=?5 WHERE run_id=?1",
                params![run_id, status, result, error, now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn put_candidate(&self, c: &Candidate) -> Result<String> {
        let hash = c.hash();
        self.conn
            .execute(
                // Stored again, a candidate is renewed: `gc` spares what was stored within the hour.
                "INSERT INTO candidates(hash, name, target, source, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT(hash) DO UPDATE SET created_at=excluded.created_at",
                params![hash, c.plan.name, c.plan.target.name(), c.to_json().to_string(), now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(hash)
    }

    pub fn candidate(&self, hash: &str) -> Result<Option<Candidate>> {
        let src: Option<String> = self
            .conn
            .query_row("SELECT source FROM candidates WHERE hash=?1", [hash], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.sql(e))?;
        src.map(|s| {
            let v: Value = serde_json::from_str(&s).map_err(|e| StoreError::Other {
                path: self.path.clone(),
                message: format!("candidate {hash}: {e}"),
            })?;
            Candidate::from_json(&v).map_err(|m| StoreError::Other {
                path: self.path.clone(),
                message: format!("candidate {hash}: {m}"),
            })
        })
        .transpose()
    }

    /// Starts (or restarts, after a kill) attempt `seq` of a phase.
    pub fn begin_attempt(
        &self,
        run_id: &str,
        phase: Phase,
        seq: i64,
        candidate: &str,
        parent: Option<&str>,
        origin: &str,
    ) -> Result<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO attempts(run_id, phase, seq, candidate, parent, origin, finished, started_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7)",
                params![run_id, phase, seq, candidate, parent, origin, now()],
            )
            .map_err(|e| self.sql(e))?;
        self.touch(run_id)
    }

    pub fn finish_attempt(
        &self,
        run_id: &str,
        phase: Phase,
        seq: i64,
        summary: &Summary,
    ) -> Result<()> {
        self.conn
            .execute(
                "UPDATE attempts SET finished=1, summary=?4, finished_at=?5 WHERE run_id=?1 AND phase=?2 AND seq=?3",
                params![run_id, phase, seq, serde_json::to_string(summary).unwrap(), now()],
            )
            .map_err(|e| self.sql(e))?;
        self.touch(run_id)
    }

    fn touch(&self, run_id: &str) -> Result<()> {
        self.conn
            .execute(
                "UPDATE runs SET updated_at=?2 WHERE run_id=?1",
                params![run_id, now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn attempts(&self, run_id: &str, phase: Option<Phase>) -> Result<Vec<Attempt>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT seq, phase, candidate, parent, origin, finished, summary, started_at, finished_at
                 FROM attempts
                 WHERE run_id=?1 AND (?2 IS NULL OR phase=?2) ORDER BY phase DESC, seq",
            )
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map(params![run_id, phase], |r| {
                let summary: Option<String> = r.get(6)?;
                Ok(Attempt {
                    seq: r.get(0)?,
                    phase: r.get(1)?,
                    candidate: r.get(2)?,
                    parent: r.get(3)?,
                    origin: r.get(4)?,
                    finished: r.get::<_, i64>(5)? != 0,
                    summary: summary.and_then(|s| serde_json::from_str(&s).ok()),
                    started_at: r.get(7)?,
                    finished_at: r.get(8)?,
                })
            })
            .map_err(|e| self.sql(e))?;
        rows.collect::<std::result::Result<_, _>>()
            .map_err(|e| self.sql(e))
    }

    /// Records one workload's result; committed immediately.
    pub fn put_evaluation(
        &self,
        run_id: &str,
        phase: Phase,
        candidate: &str,
        r: &WorkloadResult,
    ) -> Result<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO evaluations(run_id, phase, candidate, workload, status, median_s, result, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    run_id,
                    phase,
                    candidate,
                    r.workload,
                    r.status.name(),
                    r.median_s(),
                    serde_json::to_string(r).unwrap(),
                    now()
                ],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn evaluation(
        &self,
        run_id: &str,
        phase: Phase,
        candidate: &str,
        workload: &str,
    ) -> Result<Option<WorkloadResult>> {
        let s: Option<String> = self
            .conn
            .query_row(
                "SELECT result FROM evaluations WHERE run_id=?1 AND phase=?2 AND candidate=?3 AND workload=?4",
                params![run_id, phase, candidate, workload],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        Ok(s.and_then(|s| serde_json::from_str(&s).ok()))
    }

    /// Every stored evaluation of a run, in the order they were recorded: (id, phase, candidate, result).
    pub fn evaluations(&self, run_id: &str) -> Result<Vec<(i64, Phase, String, WorkloadResult)>> {
        let mut st = self
            .conn
            .prepare(
                "SELECT id, phase, candidate, result FROM evaluations WHERE run_id=?1 ORDER BY id",
            )
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([run_id], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Phase>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, phase, cand, s) = row.map_err(|e| self.sql(e))?;
            let r: WorkloadResult = serde_json::from_str(&s).map_err(|e| StoreError::Other {
                path: self.path.clone(),
                message: format!("evaluation {id}: {e}"),
            })?;
            out.push((id, phase, cand, r));
        }
        Ok(out)
    }

    pub fn set_strategy_state(&self, run_id: &str, state: &Value) -> Result<()> {
        self.conn
            .execute(
                "INSERT OR REPLACE INTO strategy_state(run_id, state, updated_at) VALUES (?1, ?2, ?3)",
                params![run_id, state.to_string(), now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn strategy_state(&self, run_id: &str) -> Result<Option<Value>> {
        let s: Option<String> = self
            .conn
            .query_row(
                "SELECT state FROM strategy_state WHERE run_id=?1",
                [run_id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        Ok(s.and_then(|s| serde_json::from_str(&s).ok()))
    }

    /// Records one LLM exchange (prompt and reply, never a key). Sequence numbers continue across resumes.
    pub fn put_exchange(&self, run_id: &str, ex: &crate::llm::Exchange) -> Result<()> {
        let seq: i64 = self
            .conn
            .query_row(
                "SELECT COALESCE(MAX(seq) + 1, 0) FROM llm_exchanges WHERE run_id=?1",
                [run_id],
                |r| r.get(0),
            )
            .map_err(|e| self.sql(e))?;
        let outcome = match &ex.outcome {
            crate::llm::Outcome::Ok { .. } => "ok".to_string(),
            crate::llm::Outcome::Err { kind, .. } => kind.clone(),
        };
        self.conn
            .execute(
                "INSERT INTO llm_exchanges(run_id, seq, purpose, provider, model, outcome, exchange, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![run_id, seq, ex.purpose, ex.provider, ex.model, outcome, serde_json::to_string(ex).unwrap(), now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn exchanges(&self, run_id: &str) -> Result<Vec<crate::llm::Exchange>> {
        let mut st = self
            .conn
            .prepare("SELECT exchange FROM llm_exchanges WHERE run_id=?1 ORDER BY seq")
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([run_id], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let s = row.map_err(|e| self.sql(e))?;
            out.push(serde_json::from_str(&s).map_err(|e| StoreError::Other {
                path: self.path.clone(),
                message: format!("llm exchange of {run_id}: {e}"),
            })?);
        }
        Ok(out)
    }

    pub fn put_snapshot(&self, run_id: &str, tree: &Value) -> Result<()> {
        self.conn
            .execute(
                "INSERT INTO wm_snapshots(run_id, idx, tree, created_at)
                 VALUES (?1, (SELECT COALESCE(MAX(idx) + 1, 0) FROM wm_snapshots WHERE run_id=?1), ?2, ?3)",
                params![run_id, tree.to_string(), now()],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    pub fn snapshots(&self, run_id: &str) -> Result<Vec<Value>> {
        let mut st = self
            .conn
            .prepare("SELECT tree FROM wm_snapshots WHERE run_id=?1 ORDER BY idx")
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([run_id], |r| r.get::<_, String>(0))
            .map_err(|e| self.sql(e))?;
        rows.map(|r| r.map(|s| serde_json::from_str(&s).unwrap_or(Value::Null)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.sql(e))
    }

    fn run_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
        let json = |s: Option<String>| {
            s.and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or(Value::Null)
        };
        Ok(RunRow {
            run_id: r.get(0)?,
            task: r.get(1)?,
            task_dir: r.get(2)?,
            target: r.get(3)?,
            strategy: r.get(4)?,
            budget: r.get(5)?,
            status: r.get(6)?,
            config: json(r.get(7)?),
            hello: json(r.get(8)?),
            result: RunResult::from_stored(&json(r.get(9)?)),
            error: r.get(10)?,
            pid: r.get(11)?,
            created_at: r.get(12)?,
            updated_at: r.get(13)?,
            evaluations: r.get(14)?,
        })
    }

    const RUN_SELECT: &str = "SELECT r.run_id, r.task, r.task_dir, r.target, r.strategy, r.budget, r.status,
        r.config, r.hardware, r.result, r.error, r.pid, r.created_at, r.updated_at,
        (SELECT COUNT(*) FROM attempts a WHERE a.run_id=r.run_id AND a.phase='search' AND a.finished=1)
        FROM runs r";

    pub fn run(&self, run_id: &str) -> Result<Option<RunRow>> {
        self.conn
            .query_row(
                &format!("{} WHERE r.run_id=?1", Self::RUN_SELECT),
                [run_id],
                Self::run_from_row,
            )
            .optional()
            .map_err(|e| self.sql(e))
            .map(|r| r.map(mark_interrupted))
    }

    /// A short summary of everything the store holds that a view shows (runs and their updates, attempts
    /// begun and finished, evaluations, LLM exchanges, strategy states, tree snapshots): it changes whenever
    /// a run writes anything a page would draw differently. `ksearch serve` polls it.
    pub fn change_mark(&self) -> Result<String> {
        self.conn
            .query_row(
                "SELECT (SELECT COUNT(*) || '.' || COALESCE(MAX(updated_at), 0) FROM runs) || '/' ||
                        (SELECT COUNT(*) || '.' || COALESCE(SUM(finished), 0) FROM attempts) || '/' ||
                        (SELECT COALESCE(MAX(id), 0) FROM evaluations) || '/' ||
                        (SELECT COUNT(*) FROM llm_exchanges) || '/' ||
                        (SELECT COALESCE(MAX(updated_at), 0) FROM strategy_state) || '/' ||
                        (SELECT COUNT(*) FROM wm_snapshots)",
                [],
                |r| r.get::<_, String>(0),
            )
            .map_err(|e| self.sql(e))
    }

    /// A run's LLM calls and their summed cost (None where no call was priced), without reading the
    /// prompts and replies (`exchanges` does): a dashboard lists every run's spend.
    pub fn llm_spend(&self, run_id: &str) -> Result<(u64, Option<f64>)> {
        self.conn
            .query_row(
                "SELECT COUNT(*), SUM(json_extract(exchange, '$.outcome.cost_usd'))
                 FROM llm_exchanges WHERE run_id=?1",
                [run_id],
                |r| Ok((r.get::<_, i64>(0)? as u64, r.get::<_, Option<f64>>(1)?)),
            )
            .map_err(|e| self.sql(e))
    }

    pub fn runs(&self) -> Result<Vec<RunRow>> {
        let mut st = self
            .conn
            .prepare(&format!("{} ORDER BY r.created_at", Self::RUN_SELECT))
            .map_err(|e| self.sql(e))?;
        let rows = st
            .query_map([], Self::run_from_row)
            .map_err(|e| self.sql(e))?;
        rows.map(|r| r.map(mark_interrupted))
            .collect::<std::result::Result<_, _>>()
            .map_err(|e| self.sql(e))
    }
}

fn schema_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("PRAGMA user_version", [], |r| r.get(0))
}

fn newer(path: &Path, v: i64) -> StoreError {
    StoreError::Other {
        path: path.to_path_buf(),
        message: format!(
            "written by a newer ksearch (schema {v}; this one knows up to {SCHEMA_VERSION}): use that \
             ksearch, or another --store"
        ),
    }
}

/// Brings a store written by an older ksearch to `SCHEMA_VERSION` in one transaction (a step that fails
/// leaves the store as it was, and says why); refuses a newer one. A new store passes through every step.
fn migrate(conn: &Connection, path: &Path) -> Result<()> {
    let sql = |source| StoreError::Sql {
        path: path.to_path_buf(),
        source,
    };
    if schema_version(conn).map_err(sql)? == SCHEMA_VERSION {
        return Ok(());
    }
    // Taken for writing at once, and the version read again inside: another process may have migrated it
    // (or a newer ksearch written it) since.
    let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)
        .map_err(sql)?;
    let v = schema_version(&tx).map_err(sql)?;
    if v > SCHEMA_VERSION {
        return Err(newer(path, v));
    }
    if v == SCHEMA_VERSION {
        return Ok(());
    }
    if v < 1 {
        // 0 → 1 (stores written before 2026-12-03): run statuses and attempt phases became typed; every
        // stored value must be one this ksearch knows. Candidates are looked up by attempt (gc).
        let known = |all: &[&str]| {
            all.iter()
                .map(|s| format!("'{s}'"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let statuses: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
        let phases: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        for (table, column, all) in [
            ("runs", "status", &statuses),
            ("attempts", "phase", &phases),
            ("evaluations", "phase", &phases),
        ] {
            let unknown: Vec<String> = tx
                .prepare(&format!(
                    "SELECT DISTINCT {column} FROM {table} WHERE {column} NOT IN ({})",
                    known(all)
                ))
                .and_then(|mut st| {
                    st.query_map([], |r| r.get::<_, String>(0))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .map_err(sql)?;
            if !unknown.is_empty() {
                return Err(StoreError::Other {
                    path: path.to_path_buf(),
                    message: format!(
                        "cannot bring this store to schema {SCHEMA_VERSION}: {table}.{column} holds {unknown:?}, \
                         which this ksearch does not know; open it with the ksearch that wrote it"
                    ),
                });
            }
        }
        tx.execute_batch(
            "CREATE INDEX IF NOT EXISTS attempts_by_candidate ON attempts(candidate);",
        )
        .map_err(sql)?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(sql)?;
    tx.commit().map_err(sql)
}

/// A path as the path part of an SQLite `file:` URI (`%`, `?` and `#` escaped; absolute).
fn uri_path(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut out = String::new();
    for c in abs.to_string_lossy().chars() {
        match c {
            '%' => out.push_str("%25"),
            '?' => out.push_str("%3f"),
            '#' => out.push_str("%23"),
            c => out.push(c),
        }
    }
    out
}

fn process_alive(pid: i64) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0
        && pid <= i32::MAX as i64
        && (unsafe { libc::kill(pid as i32, 0) } == 0
            // Another user's process (a shared store): alive, only not ours to signal.
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// A run marked `running` whose process is gone was killed: show it as `interrupted`.
fn mark_interrupted(mut r: RunRow) -> RunRow {
    if r.status == RunStatus::Running && !r.pid.is_some_and(process_alive) {
        r.status = RunStatus::Interrupted;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::Status;

    /// What a store holds, in a form two reads can be compared by.
    fn contents(s: &Store) -> Vec<String> {
        let mut out = Vec::new();
        for r in s.runs().unwrap() {
            // A result written before results were typed reads typed.
            let result = r.result.as_ref().expect("a finished run's result reads");
            out.push(format!(
                "{} {} {} {}",
                r.run_id,
                r.status,
                r.evaluations,
                serde_json::to_string(result).unwrap()
            ));
            for a in s.attempts(&r.run_id, None).unwrap() {
                out.push(format!(
                    "{} {} {} {}",
                    a.phase, a.seq, a.candidate, a.finished
                ));
            }
            out.push(format!(
                "{} evaluations",
                s.evaluations(&r.run_id).unwrap().len()
            ));
            out.push(format!(
                "{} exchanges",
                s.exchanges(&r.run_id).unwrap().len()
            ));
            out.push(format!(
                "{} snapshots",
                s.snapshots(&r.run_id).unwrap().len()
            ));
            out.push(format!("{:?}", s.strategy_state(&r.run_id).unwrap()));
        }
        out
    }

    /// A store written by main before schema versions (tests/fixtures/store-v0-20261203.db.gz: a
    /// world-model run replayed from the shipped recording, with held-out checks, and a tune run of matmul)
    /// reads as it is; opened for writing, it is brought to the current version with everything kept. A
    /// value this ksearch does not know stops the migration and leaves the store as it was; a newer store
    /// is refused by readers and writers.
    #[test]
    fn a_store_written_before_schema_versions_reads_migrates_and_a_newer_one_is_refused() {
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/store-v0-20261203.db.gz");
        let unpack = |dir: &Path| {
            let mut db = Vec::new();
            std::io::Read::read_to_end(
                &mut flate2::read::GzDecoder::new(std::fs::File::open(&fixture).unwrap()),
                &mut db,
            )
            .unwrap();
            std::fs::write(dir.join("ksearch.db"), db).unwrap();
        };
        let dir = tempfile::tempdir().unwrap();
        unpack(dir.path());
        let before = {
            let s = Store::open_read(dir.path()).unwrap().unwrap();
            assert_eq!(schema_version(&s.conn).unwrap(), 0);
            contents(&s)
        };
        assert_eq!(
            before.iter().filter(|l| l.contains(" completed ")).count(),
            2,
            "{before:#?}"
        );
        for phase in ["search ", "held-out ", "final "] {
            assert!(
                before.iter().any(|l| l.starts_with(phase)),
                "{phase}: {before:#?}"
            );
        }
        let s = Store::open(dir.path()).unwrap();
        assert_eq!(schema_version(&s.conn).unwrap(), SCHEMA_VERSION);
        assert_eq!(contents(&s), before);
        drop(s);
        // Opened again: nothing left to do.
        assert_eq!(contents(&Store::open(dir.path()).unwrap()), before);

        // A status no ksearch wrote: the migration stops, names it, and changes nothing.
        let bad = tempfile::tempdir().unwrap();
        unpack(bad.path());
        let c = Connection::open(bad.path().join("ksearch.db")).unwrap();
        c.execute("UPDATE runs SET status='paused' WHERE strategy='tune'", [])
            .unwrap();
        drop(c);
        let err = Store::open(bad.path()).err().expect("refused").to_string();
        assert!(err.contains("runs.status holds [\"paused\"]"), "{err}");
        let c = Connection::open(bad.path().join("ksearch.db")).unwrap();
        assert_eq!(schema_version(&c).unwrap(), 0);
        assert!(
            c.prepare("SELECT name FROM sqlite_master WHERE name='attempts_by_candidate'")
                .unwrap()
                .query([])
                .unwrap()
                .next()
                .unwrap()
                .is_none()
        );
        drop(c);

        // A newer store.
        let c = Connection::open(dir.path().join("ksearch.db")).unwrap();
        c.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        drop(c);
        for err in [
            Store::open(dir.path()).err(),
            Store::open_read(dir.path()).err(),
        ] {
            let err = err.expect("refused").to_string();
            assert!(err.contains("written by a newer ksearch"), "{err}");
        }
    }

    fn result(w: &str) -> WorkloadResult {
        WorkloadResult {
            workload: w.into(),
            status: Status::Passed,
            message: String::new(),
            max_abs: Some(0.0),
            max_rel: Some(0.0),
            timing: None,
            baselines: Default::default(),
            roofline: None,
            checks: Value::Null,
            compile: Value::Null,
            metal_sources: Vec::new(),
            seeds: vec![1, 2, 3],
            elapsed_s: 0.0,
            ..Default::default()
        }
    }

    #[test]
    fn wal_mode_and_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let mode: String = s
            .conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        s.create_run("r1", "t", Path::new("/x"), "cpu", "tune", 5, &Value::Null)
            .unwrap();
        let c = Candidate {
            plan: toml::from_str(
                "name='n'\ntarget='cpu'\n[[kernel]]\nname='k'\nsource='k.c'\n[[launch]]\nkernel='k'\noutputs=['y']\n",
            )
            .unwrap(),
            files: [("k.c".to_string(), "x".to_string())].into(),
        };
        let h = s.put_candidate(&c).unwrap();
        assert_eq!(s.candidate(&h).unwrap().unwrap().hash(), h);
        s.begin_attempt("r1", Phase::Search, 0, &h, None, "seed")
            .unwrap();
        s.put_evaluation("r1", Phase::Search, &h, &result("w1"))
            .unwrap();
        assert_eq!(
            s.run("r1").unwrap().unwrap().evaluations,
            0,
            "unfinished attempts do not count"
        );
        s.finish_attempt("r1", Phase::Search, 0, &Summary::default())
            .unwrap();
        let run = s.run("r1").unwrap().unwrap();
        assert_eq!(run.evaluations, 1);
        assert_eq!(run.status, RunStatus::Running, "this process is alive");
        assert!(
            s.evaluation("r1", Phase::Search, &h, "w1")
                .unwrap()
                .is_some()
        );
        assert!(
            s.evaluation("r1", Phase::Search, &h, "w2")
                .unwrap()
                .is_none()
        );
        // A second connection sees committed data at once (what `ksearch runs` does during a run).
        let s2 = Store::open(dir.path()).unwrap();
        assert_eq!(s2.evaluations("r1").unwrap().len(), 1);
    }

    #[test]
    fn a_store_locked_too_long_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let other = Connection::open(dir.path().join("ksearch.db")).unwrap();
        other.execute_batch("BEGIN EXCLUSIVE").unwrap();
        s.conn.busy_timeout(Duration::from_millis(100)).unwrap();
        let err = s
            .create_run("r1", "t", Path::new("/x"), "cpu", "tune", 5, &Value::Null)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("ksearch.db") && err.contains("locked") && err.contains("another --store"),
            "{err}"
        );
        other.execute_batch("ROLLBACK").unwrap();
        s.create_run("r1", "t", Path::new("/x"), "cpu", "tune", 5, &Value::Null)
            .unwrap();
    }

    #[test]
    fn dead_owner_reads_as_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        s.create_run("r1", "t", Path::new("/x"), "cpu", "tune", 5, &Value::Null)
            .unwrap();
        s.conn
            .execute("UPDATE runs SET pid=?1", [i32::MAX as i64])
            .unwrap();
        assert_eq!(s.run("r1").unwrap().unwrap().status, RunStatus::Interrupted);
    }

    #[test]
    fn a_runs_seed_is_never_orphaned_and_a_candidate_stored_again_is_renewed() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(dir.path()).unwrap();
        let cand = |src: &str| {
            Candidate {
            plan: toml::from_str(
                "name='n'\ntarget='cpu'\n[[kernel]]\nname='k'\nsource='k.c'\n[[launch]]\nkernel='k'\noutputs=['y']\n",
            )
            .unwrap(),
            files: [("k.c".to_string(), src.to_string())].into(),
        }
        };
        let seed = s.put_candidate(&cand("seed")).unwrap();
        let other = s.put_candidate(&cand("other")).unwrap();
        // A run about to start (no attempt yet), from `seed`, held by a process that is gone.
        let config = serde_json::json!({"seed_candidate": seed});
        s.create_run("r1", "t", Path::new("/x"), "cpu", "tune", 5, &config)
            .unwrap();
        s.conn
            .execute("UPDATE runs SET pid=NULL, status='interrupted'", [])
            .unwrap();
        let orphans: Vec<String> = s
            .orphaned_candidates()
            .unwrap()
            .into_iter()
            .map(|(h, _)| h)
            .collect();
        assert_eq!(orphans, std::slice::from_ref(&other));
        assert_eq!(
            s.remove_orphaned_candidates(&[seed.clone(), other.clone()])
                .unwrap(),
            [other]
        );
        assert!(s.candidate(&seed).unwrap().is_some());
        // Stored again, a candidate's date is renewed (the hour `gc` spares while a run is in progress).
        s.conn
            .execute("UPDATE candidates SET created_at=0", [])
            .unwrap();
        s.put_candidate(&cand("seed")).unwrap();
        let at: f64 = s
            .conn
            .query_row(
                "SELECT created_at FROM candidates WHERE hash=?1",
                [&seed],
                |r| r.get(0),
            )
            .unwrap();
        assert!(at > 1e9, "{at}");
    }
}
