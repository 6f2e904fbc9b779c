"""Execution: the one owner of TFF's worker process (runtime), the fleet of
remote workers, the worker entry point and the exit hook.
"""
