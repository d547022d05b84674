"""The training loop's torch-free parts: the learning-rate schedule (schedule.py) and the
step driver that decides which micro-batches make each optimizer step (steps.py)."""
