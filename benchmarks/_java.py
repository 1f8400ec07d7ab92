"""The benchmarks' Java parts: ActiveMQ's jars, compiling a source of ``benchmarks/java``,
and the bulk STOMP decoder experiment (``relay_throughput.py --bulk-stomp-decoder``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

JAVA_DIR = Path(__file__).resolve().parent / "java"
BULK_STOMP_SOURCE = JAVA_DIR / "BulkStompWireFormat.java"
BULK_STOMP_CLASS = "BulkStompWireFormat"
# ActiveMQ looks a wire format's factory up by this resource, first on its class path.
_WIRE_FORMAT_SERVICE = "META-INF/services/org/apache/activemq/wireformat/stomp"


def activemq_classpath() -> str:
    """ActiveMQ's jars, as a class path wildcard."""
    for root in (os.environ.get("ACTIVEMQ_HOME"), "/usr/share/activemq"):
        if root and (Path(root) / "lib" / "activemq-client.jar").is_file():
            return str(Path(root) / "lib" / "*")
    raise RuntimeError("ActiveMQ's jars not found (set ACTIVEMQ_HOME)")


def compile_java(source: Path, classes: Path) -> None:
    """``javac`` ``source`` against ActiveMQ's jars into ``classes`` (once)."""
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError(f"javac is needed to compile {source.name}")
    if (classes / f"{source.stem}.class").is_file():
        return
    subprocess.run(
        [javac, "-d", str(classes), "-cp", activemq_classpath(), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )


def install_bulk_stomp_decoder(home: Path) -> None:
    """Give the private broker of ``home`` (``HCAT_NOTIFY_HOME``, before it starts) the
    experiment's STOMP decoder: a jar in its lib directory whose wire format service
    entry comes before ActiveMQ's own on the broker's class path (the Java source says
    why and what it decodes)."""
    classes = home / "bulk-stomp-classes"
    compile_java(BULK_STOMP_SOURCE, classes)
    lib = home / "activemq" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(lib / "hcat-bench-bulk-stomp.jar", "w") as jar:
        jar.writestr(_WIRE_FORMAT_SERVICE, f"class={BULK_STOMP_CLASS}$Factory\n")
        for path in sorted(classes.rglob("*.class")):
            jar.write(path, path.relative_to(classes).as_posix())


def require_loaded(pid: int, class_name: str) -> None:
    """Fail unless the JVM ``pid`` has loaded ``class_name`` (``jcmd``)."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        raise RuntimeError("jcmd is needed to check the broker's STOMP decoder")
    listing = subprocess.run(
        [jcmd, str(pid), "VM.class_hierarchy"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    if class_name not in listing:
        raise RuntimeError(f"the broker (pid {pid}) has not loaded {class_name}")
