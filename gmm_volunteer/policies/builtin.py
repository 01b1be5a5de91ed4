"""Old module that imported the built-in policies for their registrations; the registry
now knows them by import string (policies.registry). Kept for one release."""

from gmm_volunteer.policies import affinity, centralized, executor, uniform  # noqa: F401
