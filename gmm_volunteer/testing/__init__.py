"""Helpers to test the simulator and policies written for it."""
