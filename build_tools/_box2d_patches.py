"""Speed patches applied to the Box2D 2.3 sources, each leaving every float bit as it was.

LunarLander spends ~80% of its time in ``b2RevoluteJoint::SolveVelocityConstraints``:
Gymnasium steps with 180 velocity iterations, and while a leg rests on its
joint limit each iteration solves 2.3's 3x3 block constraint for both legs.
That loop is bound by the latency of the lander's velocity passing from one
joint to the next, not by the number of instructions, so the patches below
remove what stalls that chain (and work done for nobody) without changing a
single operation of the arithmetic:

* ``b2Timer`` reads the clock (``gettimeofday``) about ten times per
  ``b2World::Step`` to fill ``b2World::GetProfile()``, which no env reads
  (~4% of LunarLander's step).  The patch selects Box2D's own no-op timer,
  so the profile's durations read 0.
* The revolute joint's limit branch (keep the limit impulse, or release it and
  re-solve the 2x2 point constraint) flips unpredictably while a leg rests on
  its limit; valgrind's branch simulator puts ~130 mispredictions per
  LunarLander step there.  The patch computes both outcomes with the same
  float operations as 2.3 and selects one (~5%).

Each patch must match its file exactly once, or the build stops: a different
sdist must not be patched silently.  ``tests/test_box2d.py`` compares whole
episodes with Gymnasium's own (unpatched) Box2D bit for bit.
"""
from __future__ import annotations

import hashlib
from typing import NamedTuple


class Patch(NamedTuple):
    """One exact text replacement in one engine file."""

    path: str  # relative to the source root, e.g. "Box2D/Common/b2Timer.cpp"
    old: str
    new: str


_TIMER_OLD = "#elif defined(__linux__) || defined (__APPLE__)\n"
_TIMER_NEW = ("#elif 0  // torchfrag: the no-op timer below; the step profile is never read\n")

_LIMIT_OLD = """\t\tif (m_limitState == e_equalLimits)
\t\t{
\t\t\tm_impulse += impulse;
\t\t}
\t\telse if (m_limitState == e_atLowerLimit)
\t\t{
\t\t\tfloat32 newImpulse = m_impulse.z + impulse.z;
\t\t\tif (newImpulse < 0.0f)
\t\t\t{
\t\t\t\tb2Vec2 rhs = -Cdot1 + m_impulse.z * b2Vec2(m_mass.ez.x, m_mass.ez.y);
\t\t\t\tb2Vec2 reduced = m_mass.Solve22(rhs);
\t\t\t\timpulse.x = reduced.x;
\t\t\t\timpulse.y = reduced.y;
\t\t\t\timpulse.z = -m_impulse.z;
\t\t\t\tm_impulse.x += reduced.x;
\t\t\t\tm_impulse.y += reduced.y;
\t\t\t\tm_impulse.z = 0.0f;
\t\t\t}
\t\t\telse
\t\t\t{
\t\t\t\tm_impulse += impulse;
\t\t\t}
\t\t}
\t\telse if (m_limitState == e_atUpperLimit)
\t\t{
\t\t\tfloat32 newImpulse = m_impulse.z + impulse.z;
\t\t\tif (newImpulse > 0.0f)
\t\t\t{
\t\t\t\tb2Vec2 rhs = -Cdot1 + m_impulse.z * b2Vec2(m_mass.ez.x, m_mass.ez.y);
\t\t\t\tb2Vec2 reduced = m_mass.Solve22(rhs);
\t\t\t\timpulse.x = reduced.x;
\t\t\t\timpulse.y = reduced.y;
\t\t\t\timpulse.z = -m_impulse.z;
\t\t\t\tm_impulse.x += reduced.x;
\t\t\t\tm_impulse.y += reduced.y;
\t\t\t\tm_impulse.z = 0.0f;
\t\t\t}
\t\t\telse
\t\t\t{
\t\t\t\tm_impulse += impulse;
\t\t\t}
\t\t}
"""

# The else branch covers e_atLowerLimit and e_atUpperLimit (the enclosing
# test excludes e_inactiveLimit).  Kept: impulse and m_impulse += impulse,
# whose z is newImpulse.  Released: the reduced 2x2 solve, as 2.3 computes it.
_LIMIT_NEW = """\t\tif (m_limitState == e_equalLimits)
\t\t{
\t\t\tm_impulse += impulse;
\t\t}
\t\telse
\t\t{
\t\t\t// torchfrag: both outcomes of 2.3's release test, computed with its
\t\t\t// float operations, one selected without a branch (the test flips
\t\t\t// unpredictably while a body rests on the limit).
\t\t\tfloat32 newImpulse = m_impulse.z + impulse.z;
\t\t\tbool release = m_limitState == e_atLowerLimit ? newImpulse < 0.0f : newImpulse > 0.0f;
\t\t\tb2Vec2 rhs = -Cdot1 + m_impulse.z * b2Vec2(m_mass.ez.x, m_mass.ez.y);
\t\t\t// m_mass.Solve22(rhs) written out (b2Math.cpp's is not inlined here,
\t\t\t// and it now runs on every iteration): the same operations.
\t\t\tfloat32 a11 = m_mass.ex.x, a12 = m_mass.ey.x, a21 = m_mass.ex.y, a22 = m_mass.ey.y;
\t\t\tfloat32 det = a11 * a22 - a12 * a21;
\t\t\tif (det != 0.0f)
\t\t\t{
\t\t\t\tdet = 1.0f / det;
\t\t\t}
\t\t\tb2Vec2 reduced;
\t\t\treduced.x = det * (a22 * rhs.x - a12 * rhs.y);
\t\t\treduced.y = det * (a11 * rhs.y - a21 * rhs.x);
\t\t\timpulse.x = release ? reduced.x : impulse.x;
\t\t\timpulse.y = release ? reduced.y : impulse.y;
\t\t\timpulse.z = release ? -m_impulse.z : impulse.z;
\t\t\tm_impulse.x += impulse.x;
\t\t\tm_impulse.y += impulse.y;
\t\t\tm_impulse.z = release ? 0.0f : newImpulse;
\t\t}
"""

PATCHES: tuple[Patch, ...] = (
    Patch("Box2D/Common/b2Timer.cpp", _TIMER_OLD, _TIMER_NEW),
    Patch("Box2D/Dynamics/Joints/b2RevoluteJoint.cpp", _LIMIT_OLD, _LIMIT_NEW),
)


def digest() -> str:
    """A short hash of every patch, so that editing one invalidates extracted sources.

    Example:
        >>> len(digest())
        12
    """
    h = hashlib.sha256()
    for patch in PATCHES:
        h.update("\0".join(patch).encode())
    return h.hexdigest()[:12]


def apply(rel: str, text: str) -> str:
    """Returns ``text`` (the engine file ``rel``) with its patches applied.

    Raises:
        SystemExit: a patch's original text is not in the file exactly once.

    Example:
        >>> apply("Box2D/Common/b2Math.cpp", "unchanged")
        'unchanged'
    """
    for patch in PATCHES:
        if patch.path != rel:
            continue
        count = text.count(patch.old)
        if count != 1:
            raise SystemExit(f"{rel}: the speed patch's original text occurs {count} times, "
                             "expected once (build_tools/_box2d_patches.py)")
        text = text.replace(patch.old, patch.new)
    return text
