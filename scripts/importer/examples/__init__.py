"""Worked examples that produce real models for the importers (run by hand; not imported by the product)."""
