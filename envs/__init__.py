"""The world an agent acts in: domain specs, SQLite store, sandboxed tool runtime, state hash/diff."""
