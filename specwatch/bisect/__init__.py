"""The bisect (`specwatch bisect`, flows/bisection.py): which version of an ordered list of images changed a
metric. The search is analysis/bisection.py; here: each step's A/B built from the bisect file
(steps.py), and what a step and the whole bisect recorded (record.py)."""
