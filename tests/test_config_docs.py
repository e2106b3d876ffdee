"""docs/configuration.md is generated from the schema sections that check each field
(``python -m bocast.tools.config_docs``): it must be what the generator prints now."""

import os

from bocast.tools.config_docs import reference

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_configuration_reference_is_current():
    with open(os.path.join(ROOT, "docs", "configuration.md"), encoding="utf-8") as f:
        assert f.read() == reference(), ("docs/configuration.md is stale: regenerate it with "
                                         "python -m bocast.tools.config_docs > "
                                         "docs/configuration.md")


def test_the_reference_names_every_field_and_strategy_option():
    from bocast.run import comparison, config
    from bocast.strategies import strategies

    text = reference()
    names = [f.name for f in (*config.TUNE.fields, *comparison.COMPARE.fields)]
    names += [f.name for cls in strategies().values() for f in cls.options.fields]
    assert all(f"| `{n}` |" in text for n in names)


def test_every_field_and_option_has_help():
    from bocast import options
    from bocast.run import comparison, config
    from bocast.strategies import strategies

    sections = [config.TUNE, options.WORKLOAD, options.BUDGET, options.RUNNER_OPTIONS,
                comparison.COMPARE, comparison.ENTRY, *(c.options for c in strategies().values())]
    undocumented = [f.name for s in sections for f in s.fields if not f.doc.strip()]
    assert not undocumented, f"fields without a doc (docs/configuration.md): {undocumented}"
