"""Command-line entry points: `pv` (contracts) and `gates` (gates and evidence)."""
