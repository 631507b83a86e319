"""The `specwatch` command: the front layer. It imports the engine, the tasks and the flows;
nothing imports it.
"""
