"""Helpers every layer may use: rich progress bars and owned temporary folders. Imports nothing
else of the package."""
