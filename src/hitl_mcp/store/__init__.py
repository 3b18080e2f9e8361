"""Storage engines behind one narrow protocol (store/base.py)."""
