"""Segmentation builds: the tiny test model (the default one is imported: families/segmentation/importers/plates.py)."""
