"""Where a verdict comes from: evidence records and their freshness, the git history they
name, the files a measurement read (traces), recipes and the cache of the artifacts they
build, attestations, the mutation audit's record, and the project at another commit."""
