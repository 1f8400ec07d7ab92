"""Export and import: a table's partitions and definition, from one catalog to another.

* :mod:`~spark_output.transfer.manifest` — ``_hcat_export.json`` and checksummed copies;
* :mod:`~spark_output.transfer.export` — :func:`export_table`;
* :mod:`~spark_output.transfer.importer` — :func:`import_table`, through the committer;
* :mod:`~spark_output.transfer.commands` — ``hcat-notify export`` and ``import``.

docs/lifecycle.md describes the format and the guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hcat_notify.lazy import lazy_exports

if TYPE_CHECKING:
    from spark_output.transfer.export import ExportSummary, export_table
    from spark_output.transfer.importer import ChecksumMismatchError, ImportSummary, import_table
    from spark_output.transfer.manifest import Manifest, ManifestError, OutsideExportError

__all__ = [
    "ChecksumMismatchError",
    "ExportSummary",
    "ImportSummary",
    "Manifest",
    "ManifestError",
    "OutsideExportError",
    "export_table",
    "import_table",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "ExportSummary": "spark_output.transfer.export",
        "export_table": "spark_output.transfer.export",
        "ChecksumMismatchError": "spark_output.transfer.importer",
        "ImportSummary": "spark_output.transfer.importer",
        "import_table": "spark_output.transfer.importer",
        "Manifest": "spark_output.transfer.manifest",
        "ManifestError": "spark_output.transfer.manifest",
        "OutsideExportError": "spark_output.transfer.manifest",
    },
)
