"""Analysis: round order, intervals, decisions, acceptance curves, the cost model, change points, the verdict."""
