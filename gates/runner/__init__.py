"""Running tests: pytest in children forked from a warm interpreter, bound tests with or
without a mutant, many gate checks at once, and the pytest plugin that applies a mutant."""
