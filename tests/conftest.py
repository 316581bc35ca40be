"""How `make test` shares two cores (pytest-xdist, `-n 2 --dist loadgroup`).

Every test runs in the same worker as the rest of its file, in file order (a module's vLLM engine is
built once; nbval runs a notebook's cells in order in one kernel), except the headless notebook runs,
which are independent of each other and are spread over the workers one by one. Without xdist
(`pytest tests`), this hook only adds marks that nothing reads.
"""
import pytest

SPREAD = "test_notebook_runs_headlessly_with_ci_parameters"  # one item per notebook, independent


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which turns the mark into the item's group
def pytest_collection_modifyitems(config, items):
    for item in items:
        if getattr(item, "originalname", None) == SPREAD:
            continue
        group = item.path.stem
        if item.path.suffix == ".ipynb" or group == "test_notebooks":
            group = "notebooks"  # nbval and the notebook tests write the same runs/figures/01_* files
        item.add_marker(pytest.mark.xdist_group(group))
