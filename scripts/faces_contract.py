"""An import-linter contract type: between distributions, import only the other package's face (its root).

Each library distribution exports what others may use from its package root (``__all__``, served lazily so the
root stays light); its submodules are its own business and may change in any release. This contract holds every
package of ``packages`` to that: an import from one of them into another's submodule
(``from swiftcore_infer.types import Request`` instead of ``from swiftcore_infer import Request``) breaks it.
import-linter's built-in types cannot say "another package's submodules, but not its root, and not your own"
without one contract per package, hence this type (import-linter's documented extension point)::

    [tool.importlinter]
    contract_types = ["faces: scripts.faces_contract:FacesContract"]

    [[tool.importlinter.contracts]]
    type = "faces"
    packages = ["swiftcore_train", "swiftcore_infer", ...]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from importlinter import Contract, ContractCheck, fields, output

if TYPE_CHECKING:
    from grimp import ImportGraph


class FacesContract(Contract):
    """Packages import each other's roots only (type-checking imports are left out if the config says so)."""

    packages = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        """Every direct import from one listed package into a submodule of another is a violation."""
        packages = set(self.packages)  # type: ignore[arg-type]
        violations = []
        for importer in sorted(graph.modules):
            own = importer.partition(".")[0]
            if own not in packages:
                continue
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                other = imported.partition(".")[0]
                if other in packages and other != own and imported != other:
                    lines = [d["line_number"] for d in graph.get_import_details(importer=importer, imported=imported)]
                    violations.append((importer, imported, lines))
        return ContractCheck(kept=not violations, warnings=[], metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """One line per import, naming the face to import from instead."""
        for importer, imported, lines in check.metadata["violations"]:
            face = imported.partition(".")[0]
            output.print_error(
                f"{importer} (line {', '.join(map(str, lines))}) imports {imported}: import it from {face} "
                f"(add the name to {face}.__all__ if it is not there)"
            )
            output.new_line()
