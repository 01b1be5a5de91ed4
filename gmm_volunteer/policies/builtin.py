"""Imports the built-in policies so that their registrations run."""

from gmm_volunteer.policies import affinity, centralized, executor, uniform  # noqa: F401
