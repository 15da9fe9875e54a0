"""A small, total stand-in for the `math_verify` package, provided by the spade sandbox.

`parse(text)` turns an answer into a list of candidate values; `verify(gold, target)` says
whether two parsed answers are mathematically equivalent. It understands integers, decimals,
fractions (`3/4`, `\\frac{3}{4}`, `\\dfrac{3}{4}`), percentages, scientific notation, simple
LaTeX wrappers (`$...$`, `\\boxed{}`, `\\text{}`, `\\left(`), thousands separators, and
sets / tuples / lists of those. Anything else is compared as normalised text.
Neither function ever raises.
"""

from fractions import Fraction as _Fraction

__all__ = ["parse", "verify"]

_WRAPPERS = ("\\boxed", "\\text", "\\textbf", "\\mathrm", "\\mathbf", "\\displaystyle", "\\fbox")
_REL_TOL = 1e-6


def _strip_braced_command(s, command):
    """Replace `command{inner}` by `inner` wherever it appears (balanced braces)."""
    out = []
    i = 0
    while True:
        j = s.find(command + "{", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        out.append(s[i:j])
        k = j + len(command) + 1
        depth = 1
        start = k
        while k < len(s) and depth:
            if s[k] == "{":
                depth += 1
            elif s[k] == "}":
                depth -= 1
            k += 1
        out.append(s[start:k - 1] if depth == 0 else s[start:])
        i = k


def _normalise(text):
    s = str(text).strip()
    for ch in ("$",):
        s = s.replace(ch, "")
    for cmd in _WRAPPERS:
        if cmd in s:
            s = _strip_braced_command(s, cmd)
    for junk in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\ ", "\\displaystyle"):
        s = s.replace(junk, "")
    s = s.replace("\\{", "{").replace("\\}", "}").replace("\\%", "%")
    s = s.replace("\\cdot", "*").replace("\\times", "*").replace("\\div", "/")
    s = s.replace("−", "-")
    s = s.strip()
    while s.endswith(".") and not s.endswith(".."):
        s = s[:-1].rstrip()
    return s


def _frac_command(s):
    for cmd in ("\\dfrac", "\\tfrac", "\\frac"):
        if s.startswith(cmd + "{") or s.startswith("-" + cmd + "{"):
            neg = s.startswith("-")
            body = s[len(cmd) + (1 if neg else 0):]
            parts = []
            i = 0
            while i < len(body) and body[i] == "{" and len(parts) < 2:
                depth = 0
                for k in range(i, len(body)):
                    if body[k] == "{":
                        depth += 1
                    elif body[k] == "}":
                        depth -= 1
                        if depth == 0:
                            parts.append(body[i + 1:k])
                            i = k + 1
                            break
                else:
                    return None
            if len(parts) == 2 and i == len(body):
                num, den = _number(parts[0]), _number(parts[1])
                if num is not None and den is not None and den != 0:
                    value = num / den
                    return -value if neg else value
            return None
    return None


def _number(s):
    """A Fraction for a plain numeric answer, or None."""
    s = s.strip().replace(" ", "")
    if not s:
        return None
    if s.startswith("+"):
        s = s[1:]
    percent = s.endswith("%")
    if percent:
        s = s[:-1]
    if s.count(",") and all(len(g) == 3 for g in s.lstrip("-").split(",")[1:]) and s.lstrip("-").split(",")[0].isdigit():
        s = s.replace(",", "")
    value = _frac_command(s)
    if value is None:
        if s.count("/") == 1:
            a, b = s.split("/")
            na, nb = _number(a), _number(b)
            if na is None or nb is None or nb == 0:
                return None
            value = na / nb
        else:
            try:
                if any(c not in "0123456789.-eE" for c in s):
                    return None
                value = _Fraction(s)
            except (ValueError, ZeroDivisionError, OverflowError):
                return None
    return value / 100 if percent else value


def _split_top_level(s):
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _value(s):
    s = _normalise(s)
    num = _number(s)
    if num is not None:
        return ("num", num)
    if len(s) >= 2 and s[0] + s[-1] in ("()", "[]", "{}"):
        kind = "set" if s[0] == "{" else "seq"
        items = tuple(_value(p) for p in _split_top_level(s[1:-1]))
        return (kind, items)
    if "," in s and not any(c.isalpha() for c in s):
        parts = _split_top_level(s)
        if len(parts) > 1:
            return ("seq", tuple(_value(p) for p in parts))
    if s.count("=") == 1:
        lhs, rhs = s.split("=")
        if lhs.strip().isalpha() and len(lhs.strip()) <= 2:
            return _value(rhs)
    return ("text", s.replace(" ", "").lower())


def parse(text, *args, **kwargs):
    """Parse an answer into a list of candidate values (empty when nothing can be read)."""
    try:
        if isinstance(text, (int, float)) and not isinstance(text, bool):
            return [("num", _Fraction(text))]
        return [_value(text)]
    except Exception:
        return []


def _equal(a, b):
    ka, va = a
    kb, vb = b
    if ka == "num" and kb == "num":
        if va == vb:
            return True
        scale = max(abs(va), abs(vb))
        return scale != 0 and abs(va - vb) <= _REL_TOL * scale
    if ka == "set" and kb in ("set", "seq") or kb == "set" and ka == "seq":
        if len(va) != len(vb):
            return False
        unused = list(vb)
        for x in va:
            for i, y in enumerate(unused):
                if _equal(x, y):
                    del unused[i]
                    break
            else:
                return False
        return True
    if ka == "seq" and kb == "seq":
        return len(va) == len(vb) and all(_equal(x, y) for x, y in zip(va, vb))
    if ka == "text" and kb == "text":
        return va == vb
    return False


def verify(gold, target, *args, **kwargs):
    """True when some candidate of `gold` equals some candidate of `target`."""
    try:
        golds = gold if isinstance(gold, list) else parse(gold)
        targets = target if isinstance(target, list) else parse(target)
        return any(_equal(g, t) for g in golds for t in targets)
    except Exception:
        return False
