"""`pv`: the strict validator (schema, semantic, project and cross-file checks), its
renderers, the static index of pytest node ids, contract diffs and in-place edits, and the
scaffold `pv init` writes."""
