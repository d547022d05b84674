"""The run config: one YAML file defines a training run (model, data, optimizer, training,
monitoring). schema.json is its JSON Schema; load.py reads and checks it; algebra.py is the
C-TRAINCFG-001 step/epoch/warmup/token preflight; schedule.py is the learning rate of every
step it describes (warmup + cosine to min_lr); sequences.py counts N from the shard
manifest; alerts.py parses the monitoring.alerts rules; validate.py is a config's findings
without data (load, data-free algebra, dead alert rules); commands.py is `trainer validate`.
Nothing here imports torch."""
