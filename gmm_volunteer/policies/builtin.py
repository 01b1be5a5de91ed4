"""Imports the built-in policies so that their registrations run."""
