"""The DeepMind Control Suite models dm_control builds from a template (swimmers, manipulator).

dm_control's ``swimmer.py`` does not ship ``swimmer6.xml`` or ``swimmer15.xml``:
it reads ``swimmer.xml`` (a head and an empty chain) and appends N - 1 bodies,
each with a hinge of range +-360/N degrees, a motor, a velocimeter and a gyro,
then moves the tracking cameras out by N / 6; ``manipulator.py`` removes the
props (ball, peg, cup, slot and targets) a task does not use.  :func:`write_generated_models`
builds the same model with the standard library's ElementTree (dm_control is
never imported: it needs another MuJoCo than the pool's) into a cache folder
beside a ``common`` link to the suite's shared includes, and the C++ tasks find
it through ``TORCHFRAG_DMC_GENERATED``.

Example:
    >>> import os
    >>> from torchfrag._dmc_models import swimmer_xml
    >>> suite = os.environ["TORCHFRAG_DMC_ASSETS"]  # set when torchfrag is imported
    >>> "joint_4" in swimmer_xml(suite, 6) and "joint_5" not in swimmer_xml(suite, 6)
    True
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import xml.etree.ElementTree as ET

GENERATED_ENV_VAR = "TORCHFRAG_DMC_GENERATED"
SWIMMER_BODIES = (6, 15)
# manipulator task -> the props it keeps (dm_control's make_model removes the others).
MANIPULATOR_PROPS = {
    "bring_ball": ("ball", "target_ball"),
    "bring_peg": ("peg", "target_peg"),
    "insert_ball": ("ball", "target_ball", "cup"),
    "insert_peg": ("peg", "target_peg", "slot"),
}
_ALL_PROPS = ("ball", "target_ball", "cup", "peg", "target_peg", "slot")

log = logging.getLogger(__name__)


def swimmer_xml(suite_dir: str, n_bodies: int) -> str:
    """The XML of dm_control's ``n_bodies``-body swimmer, built from the suite's template.

    Args:
        suite_dir: dm_control's suite folder (holding ``swimmer.xml``).
        n_bodies: Bodies in the chain, the head included (at least 3).

    Returns:
        The model as a string, with the template's relative includes.

    Raises:
        ValueError: fewer than 3 bodies.
    """
    if n_bodies < 3:
        raise ValueError(f"a swimmer needs at least 3 bodies, got {n_bodies}")
    root = ET.parse(os.path.join(suite_dir, "swimmer.xml")).getroot()
    parent = root.find("./worldbody/body")
    # New sections go last, as dm_control appends them: sensor order decides sensordata's layout.
    actuator = ET.SubElement(root, "actuator")
    sensor = ET.SubElement(root, "sensor")
    limit = 360.0 / n_bodies
    for k in range(n_bodies - 1):
        body = ET.Element("body", {"name": f"segment_{k}", "pos": "0 .1 0"})
        ET.SubElement(body, "geom", {"class": "visual", "name": f"visual_{k}"})
        ET.SubElement(body, "geom", {"class": "inertial", "name": f"inertial_{k}"})
        ET.SubElement(body, "site", {"name": f"site_{k}"})
        ET.SubElement(body, "joint", {"name": f"joint_{k}", "range": f"{-limit} {limit}"})
        ET.SubElement(actuator, "motor", {"name": f"motor_{k}", "joint": f"joint_{k}"})
        ET.SubElement(sensor, "velocimeter", {"name": f"velocimeter_{k}", "site": f"site_{k}"})
        ET.SubElement(sensor, "gyro", {"name": f"gyro_{k}", "site": f"site_{k}"})
        parent.append(body)
        parent = body
    scale = n_bodies / 6.0
    for camera in root.findall("./worldbody/body/camera"):
        if camera.get("mode") == "trackcom":
            camera.set("pos", " ".join(str(float(v) * scale) for v in camera.get("pos").split()))
    return ET.tostring(root, encoding="unicode")


def manipulator_xml(suite_dir: str, task: str) -> str:
    """The XML of dm_control's manipulator for ``task``: the props it does not use removed.

    Args:
        suite_dir: dm_control's suite folder (holding ``manipulator.xml``).
        task: A key of :data:`MANIPULATOR_PROPS` (``"bring_ball"``, ...).

    Returns:
        The model as a string.

    Raises:
        ValueError: an unknown task.
    """
    if task not in MANIPULATOR_PROPS:
        raise ValueError(f"no manipulator task {task!r}; known: {sorted(MANIPULATOR_PROPS)}")
    root = ET.parse(os.path.join(suite_dir, "manipulator.xml")).getroot()
    unused = set(_ALL_PROPS) - set(MANIPULATOR_PROPS[task])
    for parent in list(root.iter()):
        for child in list(parent):
            if child.tag == "body" and child.get("name") in unused:
                parent.remove(child)
    return ET.tostring(root, encoding="unicode")


def _models(suite_dir: str) -> dict[str, str]:
    out = {f"swimmer{n}.xml": swimmer_xml(suite_dir, n) for n in SWIMMER_BODIES}
    out.update({f"manipulator_{t}.xml": manipulator_xml(suite_dir, t) for t in MANIPULATOR_PROPS})
    return out


def _cache_dir(suite_dir: str) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if not os.access(os.path.dirname(base) if not os.path.isdir(base) else base, os.W_OK):
        base = tempfile.gettempdir()
    key = hashlib.sha256(os.path.realpath(suite_dir).encode()).hexdigest()[:16]
    return os.path.join(base, "torchfrag", f"dmc-{key}")


def write_generated_models(suite_dir: str) -> str | None:
    """Writes the generated models' XML (once per suite folder) and returns their folder.

    Args:
        suite_dir: dm_control's suite folder.

    Returns:
        The folder holding ``swimmer6.xml``, ``swimmer15.xml`` and
        ``manipulator_<task>.xml`` (and a ``common`` link to the suite's includes),
        or ``None`` when it cannot be written (those tasks then say their model is
        missing).
    """
    folder = _cache_dir(suite_dir)
    try:
        os.makedirs(folder, exist_ok=True)
        common = os.path.join(folder, "common")
        if not os.path.exists(common):
            try:
                os.symlink(os.path.join(suite_dir, "common"), common)
            except FileExistsError:  # another process made it first
                pass
        for name, text in _models(suite_dir).items():
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    if f.read() == text:
                        continue
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".xml")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)  # atomic: a concurrent reader sees a whole file
    except (OSError, ET.ParseError) as err:
        log.warning("cannot write dm_control's generated swimmer models to %s: %s", folder, err)
        return None
    return folder
