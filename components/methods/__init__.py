"""Allocation methods behind one protocol (see base.py); ``registry.build(name, config)``."""
