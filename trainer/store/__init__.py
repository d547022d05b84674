"""The run store: a run's metrics, params and artifacts in SQLite, and a registry of runs.

A run directory's ``runs.db`` is derived from the run's files (run_manifest.json,
metrics.jsonl, the checkpoints' manifest.json) and can always be rebuilt from them
(`trainer runs sync RUN_DIR`): metrics.jsonl stays the source of truth. The store makes a
run queryable - `trainer runs ls/show/compare` - without re-reading every file.

- schema.py: the two schemas (runs.db, registry.db), versioned by PRAGMA user_version.
- db.py: opening a store to write (WAL, busy timeout, foreign keys, checks) or to read
  (read-only), and the errors that name the file: locked, corrupt, newer, not ours.
- locks.py: which process holds a store's write lock (Linux /proc/locks), for the message.
- identity.py: the run id (kept in run_manifest.json across resumes).
- rundir.py: a run directory's files read back as the store's rows.
- sync.py: those rows written into a store, in one transaction.
- recorder.py: RunRecorder, what the training loop records live (a failure warns, never
  stops training).
- registry.py: the user's registry of runs ($SHIPGATE_HOME/registry.db).
- query.py: a stored run read back (summary, params, artifacts) for the commands.
- commands.py: `trainer runs ls | show | compare | sync`.

Torch-free, so `trainer runs` starts fast.
"""
