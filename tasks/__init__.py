"""Every Prefect task, one module per stage. Each is thin: it calls the engine (`specwatch`) and
adds only what Prefect gives (retries, caching, artifacts, logs). Naming rule: the task's name
is its function's name, a verb and what it acts on (`build_image`, `launch_arm`, ...).
"""
