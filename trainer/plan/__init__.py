"""`trainer plan`: what a run config will do, checked before it starts (issue 5).

report.py holds the plan as data (sections, verdicts, findings) and renders it as text or
JSON; memory.py sizes a training step item by item with formulas; timing.py measures a
short forward/backward and extrapolates, and says when the machine is too noisy for a
number; flops.py counts a step's model FLOPs and knows datasheet peaks; roofline.py
measures (and caches) this CPU's float32 matmul peak, which the run's metrics use too;
sections.py runs the checks; commands.py is the CLI. Contract: C-TRAINCFG-001
(contracts/training-config-kernel-v1.yaml) for the step algebra, which
trainer/config/algebra.py computes.
"""
