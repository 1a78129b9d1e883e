"""``pyproject.toml`` as setuptools reads it: no deprecated forms (issue 29, item 15)."""

import warnings
from pathlib import Path

import pytest

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def test_the_licence_is_an_spdx_expression_setuptools_reads_without_a_warning():
    pytest.importorskip("setuptools", minversion="77")  # the first to read SPDX expressions
    from setuptools.config.pyprojecttoml import apply_configuration, load_file
    from setuptools.dist import Distribution
    from setuptools.warnings import SetuptoolsDeprecationWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", SetuptoolsDeprecationWarning)  # the table form warned
        dist = apply_configuration(Distribution(), PYPROJECT)
    assert dist.metadata.license_expression == "Apache-2.0"
    # builds need a setuptools that reads the expression
    requires = load_file(PYPROJECT)["build-system"]["requires"]
    assert "setuptools>=77" in requires
