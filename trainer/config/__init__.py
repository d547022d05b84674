"""The run config: one YAML file defines a training run (model, data, optimizer, training,
monitoring). sections.py's frozen section dataclasses are the model (units and defaults),
schema.json its JSON Schema (a test keeps the two in agreement); load.py reads and checks a
file, messages.py words what is wrong with one (file:line:column, the schema's findings);
in_code.py builds a config in code or changes one by dotted key; algebra.py is the
C-TRAINCFG-001 step/epoch/warmup/token preflight; schedule.py is the learning rate of every
step it describes (warmup + cosine to min_lr); sequences.py counts N from the shard
manifest; alerts.py parses the monitoring.alerts rules; device.py refuses what the run's
device cannot honour (fp16, bf16 off CUDA); validate.py is a config's findings without data
(load, data-free algebra, device, dead alert rules); commands.py is `trainer validate`.
Nothing here imports torch at import time (device.py asks for CUDA lazily, only when the
answer matters)."""
