import pytest

from engine_support import bundle_dir


@pytest.fixture(scope="session")
def synthetic_model(tmp_path_factory):
    """Directory of the synthetic model bundle (gmm_volunteer.testing.synthetic)."""
    return bundle_dir(tmp_path_factory.mktemp("model"))
