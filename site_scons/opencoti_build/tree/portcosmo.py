"""What cosmocc's ``-fportcosmo`` does, done to the source text: ``switch`` statements over cosmopolitan's
run-time constants lowered to comparisons and gotos.

Cosmopolitan's ``EINVAL``, ``SIGBUS`` and their kin are ``extern const`` values read at startup (each system
numbers them its own way), so ``case EINVAL:`` is no integer constant expression and no stock compiler takes it.
Cosmopolitan's own gcc carries the ``-fportcosmo`` patch, which rewrites such a switch; a cosmocc built from
source with a stock gcc (and any clang) does not. :func:`lower_switches` rewrites the text instead, keeping every
line where it was (``__LINE__`` and debug info stay exact) and the meaning of the statement::

    switch (r) { case EINVAL: a(); break; default: b(); }
    { const __auto_type pc0 = (r); if (pc0 == (EINVAL)) goto pc0_1; goto pc0_2; {  pc0_1: a(); goto pc0_end; pc0_2: b(); } pc0_end:; }

Only switches whose case labels name a run-time constant (:data:`RUNTIME_CONSTANTS`) are lowered; ``break`` at the
switch's own level becomes a jump to its end (one inside a nested loop or switch is left alone).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Cosmopolitan's magic numbers that code switches over: the errno values and signal numbers (their Linux names,
# which cosmopolitan keeps). A label naming one is no constant there.
ERRNO_NAMES = frozenset("""
    E2BIG EACCES EADDRINUSE EADDRNOTAVAIL EADV EAFNOSUPPORT EAGAIN EALREADY EBADE EBADF EBADFD EBADMSG EBADR EBADRQC
    EBADSLT EBFONT EBUSY ECANCELED ECHILD ECHRNG ECOMM ECONNABORTED ECONNREFUSED ECONNRESET EDEADLK EDEADLOCK
    EDESTADDRREQ EDOM EDOTDOT EDQUOT EEXIST EFAULT EFBIG EHOSTDOWN EHOSTUNREACH EHWPOISON EIDRM EILSEQ EINPROGRESS
    EINTR EINVAL EIO EISCONN EISDIR EISNAM EKEYEXPIRED EKEYREJECTED EKEYREVOKED EL2HLT EL2NSYNC EL3HLT EL3RST
    ELIBACC ELIBBAD ELIBEXEC ELIBMAX ELIBSCN ELNRNG ELOOP EMEDIUMTYPE EMFILE EMLINK EMSGSIZE EMULTIHOP ENAMETOOLONG
    ENAVAIL ENETDOWN ENETRESET ENETUNREACH ENFILE ENOANO ENOBUFS ENOCSI ENODATA ENODEV ENOENT ENOEXEC ENOKEY ENOLCK
    ENOLINK ENOMEDIUM ENOMEM ENOMSG ENONET ENOPKG ENOPROTOOPT ENOSPC ENOSR ENOSTR ENOSYS ENOTBLK ENOTCONN ENOTDIR
    ENOTEMPTY ENOTNAM ENOTRECOVERABLE ENOTSOCK ENOTSUP ENOTTY ENOTUNIQ ENXIO EOPNOTSUPP EOVERFLOW EOWNERDEAD EPERM
    EPFNOSUPPORT EPIPE EPROTO EPROTONOSUPPORT EPROTOTYPE ERANGE EREMCHG EREMOTE EREMOTEIO ERESTART ERFKILL EROFS
    ESHUTDOWN ESOCKTNOSUPPORT ESPIPE ESRCH ESRMNT ESTALE ESTRPIPE ETIME ETIMEDOUT ETOOMANYREFS ETXTBSY EUCLEAN
    EUNATCH EUSERS EWOULDBLOCK EXDEV EXFULL
""".split())
SIGNAL_NAMES = frozenset("""
    SIGABRT SIGALRM SIGBUS SIGCHLD SIGCLD SIGCONT SIGEMT SIGFPE SIGHUP SIGILL SIGINFO SIGINT SIGIO SIGIOT SIGKILL
    SIGPIPE SIGPOLL SIGPROF SIGPWR SIGQUIT SIGSEGV SIGSTKFLT SIGSTOP SIGSYS SIGTERM SIGTHR SIGTRAP SIGTSTP SIGTTIN
    SIGTTOU SIGURG SIGUSR1 SIGUSR2 SIGVTALRM SIGWINCH SIGXCPU SIGXFSZ
""".split())
RUNTIME_CONSTANTS = ERRNO_NAMES | SIGNAL_NAMES
_NAME = re.compile(r"[A-Za-z_]\w*")
# A text no case label of which can name one (a quick look before the token-level pass, which costs seconds on a
# large file): `case`, then one of the names before the label's ':'.
_MAY_NEED = re.compile(r"\bcase\b[^:;{}]*\b(?:" + "|".join(sorted(RUNTIME_CONSTANTS)) + r")\b")


def names_runtime_constant(label: str) -> bool:
    """Whether a case label's expression names one of RUNTIME_CONSTANTS."""
    return any(name in RUNTIME_CONSTANTS for name in _NAME.findall(label))


_TOKEN = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<directive>^[ \t]*\#(?:\\\n|[^\n])*)
  | (?P<raw>R"(?P<delim>[^(\s]{0,16})\(.*?\)(?P=delim)")
  | (?P<string>(?:u8|[uUL])?"(?:\\.|[^"\\\n])*")
  | (?P<char>(?:u8|[uUL])?'(?:\\.|[^'\\\n])*')
  | (?P<word>[A-Za-z_]\w*)
  | (?P<number>\.?\d(?:[eEpP][+-]|[\w.'])*)
  | (?P<punct>::|\.\.\.|->|[^\sA-Za-z_0-9])
  | (?P<space>\s+)
""", re.VERBOSE | re.DOTALL | re.MULTILINE)
_LOOPS = ("for", "while", "do")


class PortcosmoError(ValueError):
    """The text is not C the lowering can follow (an unbalanced bracket, a switch without a body)."""


@dataclass(frozen=True)
class Token:
    kind: str
    text: str


def tokens(text: str) -> list[Token]:
    out = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:  # a stray character (a lone quote in a disabled #if block): kept as it is
            out.append(Token("punct", text[pos]))
            pos += 1
            continue
        kind = match.lastgroup if match.lastgroup != "delim" else "raw"
        out.append(Token(kind or "punct", match.group(0)))
        pos = match.end()
    return out


def _code(toks: list[Token], start: int) -> int:
    """The index of the first token at or after ``start`` that is code (no space, comment or directive)."""
    while start < len(toks) and toks[start].kind in ("space", "comment", "directive"):
        start += 1
    return start


def _close(toks: list[Token], start: int) -> int:
    """The index of the bracket closing the one at ``start``."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    opening, closing, depth = toks[start].text, pairs[toks[start].text], 0
    for i in range(start, len(toks)):
        if toks[i].kind == "punct":
            depth += toks[i].text == opening
            depth -= toks[i].text == closing
            if depth == 0:
                return i
    raise PortcosmoError(f"unbalanced {opening!r}")


class _Lowering:
    def __init__(self, toks: list[Token], cxx: bool) -> None:
        self.toks = toks
        self.auto = "auto" if cxx else "__auto_type"
        self.out: dict[int, str] = {}  # token index -> its replacement text
        self.count = 0

    def run(self) -> str:
        self._walk(0, len(self.toks))
        return "".join(self.out.get(i, t.text) for i, t in enumerate(self.toks))

    def _walk(self, start: int, end: int) -> None:
        for i in range(start, end):
            if self.toks[i].kind == "word" and self.toks[i].text == "switch" and i not in self.out:
                self._switch(i)

    def _switch(self, at: int) -> None:
        paren = _code(self.toks, at + 1)
        if paren >= len(self.toks) or self.toks[paren].text != "(":
            return  # not a statement (a macro named switch, say)
        paren_end = _close(self.toks, paren)
        brace = _code(self.toks, paren_end + 1)
        if brace >= len(self.toks) or self.toks[brace].text != "{":
            return  # a switch over one statement (or in a macro's text): its labels, if any, are left as written
        brace_end = _close(self.toks, brace)
        labels, breaks = self._own(brace + 1, brace_end)
        self._walk(brace + 1, brace_end)  # nested switches first, whatever this one does
        if not any(names_runtime_constant(value) for value, _ in labels if value is not None):
            return
        n = self.count
        self.count += 1
        var = f"__portcosmo{n}"
        dispatch = []
        default = f"{var}_end"
        for k, (value, index) in enumerate(labels):
            label = f"{var}_{k}"
            for j in range(index, self._colon(index) + 1):
                self._blank(j)
            self.out[index] = f"{label}:" + self.out[index]
            if value is None:
                default = label
            elif "..." in value:
                low, high = value.split("...", 1)
                dispatch.append(f"if ({var} >= ({low.strip()}) && {var} <= ({high.strip()})) goto {label};")
            else:
                dispatch.append(f"if ({var} == ({value})) goto {label};")
        condition = " ".join("".join(t.text for t in self.toks[paren + 1:paren_end]).splitlines())
        for j in range(at + 1, paren_end + 1):
            self._blank(j)
        self.out[at] = f"{{ const {self.auto} {var} = ({condition}); {' '.join(dispatch)} goto {default}; "
        for index in breaks:
            self.out[index] = f"goto {var}_end"
        self.out[brace_end] = f"}} {var}_end:; }}"

    def _blank(self, index: int) -> None:
        """Take a token out, keeping its line breaks: every later line stays where it was."""
        self.out[index] = "\n" * self.toks[index].text.count("\n")

    def _colon(self, index: int) -> int:
        """The ':' ending the label that starts at ``index`` (``case X:`` or ``default:``)."""
        depth = 0
        for j in range(index + 1, len(self.toks)):
            text = self.toks[j].text
            if text in ("(", "[", "{"):
                depth += 1
            elif text in (")", "]", "}"):
                depth -= 1
            elif text == ":" and depth == 0 and self.toks[j].kind == "punct":
                return j
        raise PortcosmoError("a case label without its ':'")

    def _own(self, start: int, end: int) -> tuple[list[tuple[str | None, int]], list[int]]:
        """This switch's labels ((value or None for default, token index)) and its own ``break`` tokens."""
        breaks: list[int] = []
        return self._scan(start, end, breaks), breaks

    def _scan(self, start: int, end: int, breaks: list[int] | None) -> list[tuple[str | None, int]]:
        """The labels between ``start`` and ``end`` that belong to this switch (not to a nested one: a label inside
        a loop is still its own, Duff's device); its ``break`` tokens go to ``breaks`` (None: inside a loop)."""
        labels: list[tuple[str | None, int]] = []
        i = start
        while i < end:
            tok = self.toks[i]
            if tok.kind == "word" and tok.text == "switch":
                i = self._region_end(i)  # its labels and breaks are its own
                continue
            if tok.kind == "word" and tok.text in _LOOPS:
                region = self._region_end(i)
                labels += self._scan(i + 1, region, None)  # a break in there is the loop's
                i = region
                continue
            if tok.kind == "word" and tok.text == "case":
                colon = self._colon(i)
                labels.append(("".join(t.text for t in self.toks[i + 1:colon]).strip(), i))
                i = colon + 1
                continue
            if tok.kind == "word" and tok.text == "default" and self.toks[_code(self.toks, i + 1)].text == ":":
                labels.append((None, i))
            elif tok.kind == "word" and tok.text == "break" and breaks is not None:
                breaks.append(i)
            i += 1
        return labels

    def _region_end(self, at: int) -> int:
        """The index just past the statement a ``switch``/``for``/``while``/``do`` keyword at ``at`` begins
        (for ``do``, its body; a ``while (...)`` with no body, a do-while's tail, ends at its ``;``)."""
        keyword = self.toks[at].text
        nxt = _code(self.toks, at + 1)
        if keyword != "do":
            if nxt >= len(self.toks) or self.toks[nxt].text != "(":
                return at + 1
            nxt = _code(self.toks, _close(self.toks, nxt) + 1)
        if nxt < len(self.toks) and self.toks[nxt].text == "{":
            return _close(self.toks, nxt) + 1
        return self._statement_end(nxt)

    def _statement_end(self, start: int) -> int:
        """Just past a statement without braces: its ';' at bracket depth 0 (a braced block inside counts whole)."""
        depth = 0
        for j in range(start, len(self.toks)):
            text = self.toks[j].text
            if self.toks[j].kind != "punct":
                continue
            if text in ("(", "[", "{"):
                depth += 1
            elif text in (")", "]", "}"):
                depth -= 1
                if depth == 0 and text == "}" and self.toks[_code(self.toks, j + 1)].text not in (";", "else"):
                    return j + 1
            elif text == ";" and depth == 0:
                return j + 1
        raise PortcosmoError("a statement without its ';'")


def lower_switches(text: str, cxx: bool) -> str:
    """``text`` with every switch over a run-time constant lowered (see the module); the rest byte for byte."""
    if not _MAY_NEED.search(text):
        return text
    return _Lowering(tokens(text), cxx).run()
