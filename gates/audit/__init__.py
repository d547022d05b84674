"""`gates audit`: every bound test passes on the real code and fails on each of its mutants
(bound_tests), every measurement fails under its mutants (measurements), and the seams a
mutant patches are checked before any test runs (seams)."""
