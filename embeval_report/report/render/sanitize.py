"""The last step of every HTML report: an allow-list sanitizer and a strict Content-Security-Policy.

User strings are escaped where they are written (:mod:`embeval_report.present.escape`); this is the second
line. :func:`sanitize_page` re-writes a whole page through the standard library's HTML parser, keeping only

* elements of an allow-list (HTML's text, table, figure and page elements, MathML, SVG's shapes and text); a
  script, frame, object, embed, template or SVG animation is dropped with its content, any other unknown
  element loses its tags and keeps its text. Scripts are kept only where the renderer's page has its own
  (``scripts=True``, the Quarto page: outside its ``<main>``, the report's content);
* attributes that are not event handlers (``on*``), ``srcdoc`` or odd names; a URL attribute (``href``,
  ``src``, ``xlink:href``, ``action``, ``formaction``, ``srcset``, ...) only with a relative URL, a
  ``#fragment`` or an ``http``, ``https`` or ``mailto`` scheme, and an image's source also as a base64
  ``data:image/png|jpeg|gif|svg+xml`` URI (the figures the renderer embeds; an SVG shown as an image runs no
  script); ``style`` without ``javascript:``, ``expression(`` or bindings;
* ``<meta>`` and ``<link>`` in the head only (no refresh; a link only to an embedded ``data:`` stylesheet, font
  or icon), no ``<base>``, no comments;
* text and attribute values with every bidi control and zero-width space shown (``<U+202E>``,
  :func:`~embeval_report.present.escape.visible`), whatever wrote them.

Then :func:`sanitize_page` puts a ``Content-Security-Policy`` meta at the top of the head: nothing loads but
inline styles and ``data:`` images (and for the Quarto page ``data:`` fonts and stylesheets, and its own
scripts, each allowed by its SHA-256 hash, so a script that got into the page would not run).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import html as _html
import re
import urllib.parse
from html.parser import HTMLParser

from ...present.escape import visible

__all__ = ["sanitize_page", "csp", "safe_url"]

_HTML = """a abbr address article aside b bdi bdo blockquote body br button caption center cite code col colgroup data
dd del details dfn div dl dt em figcaption figure footer h1 h2 h3 h4 h5 h6 head header hgroup hr html i img input
ins kbd label legend li link main mark menu meta nav ol optgroup option p picture pre q rp rt ruby s samp section
select small source span strong style sub summary sup table tbody td tfoot th thead time title tr u ul var wbr"""
_MATHML = """math maction annotation annotation-xml menclose merror mfenced mfrac mi mmultiscripts mn mo mover mpadded
mphantom mprescripts mroot mrow ms mspace msqrt mstyle msub msubsup msup mtable mtd mtext mtr munder munderover
none semantics"""
_SVG = """svg g defs symbol use path rect circle ellipse line polyline polygon text tspan textpath title desc
clippath mask pattern lineargradient radialgradient stop marker image filter fegaussianblur feoffset feblend
feflood fecomposite femerge femergenode fecolormatrix"""
ALLOWED = frozenset((_HTML + " " + _MATHML + " " + _SVG).split())
#: dropped with everything inside them
DROPPED = frozenset("""script iframe frame frameset object embed applet noframes noembed noscript template portal
fencedframe xmp plaintext textarea foreignobject animate animatemotion animatetransform set""".split())
_VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
URL_ATTRIBUTES = frozenset("""href src xlink:href action formaction srcset poster background cite longdesc data
codebase ping lowsrc dynsrc icon manifest profile usemap xml:base""".split())
_IMAGE_DATA = re.compile(r"data:image/(?:png|jpeg|gif|svg\+xml);base64,[a-z0-9+/=\s]*$", re.I)
_HEAD_DATA = re.compile(r"data:(?:text/css|font/[\w.+-]+|application/(?:x-)?font-[\w.+-]+|image/[\w.+-]+)"
                        r"[;,]", re.I)
_SCHEME = re.compile(r"([a-z][a-z0-9+.-]*):")
_SAFE_SCHEMES = ("http", "https", "mailto")
_NAME = re.compile(r"[a-zA-Z_:][-a-zA-Z0-9_:.]*$")
_URL_NOISE = re.compile(r"[\x00-\x20\x7f]+")
_BAD_STYLE = re.compile(r"javascript:|vbscript:|expression\(|-moz-binding|behaviou?r\s*:|url\((?!\s*['\"]?\s*data:)",
                        re.I)
_META_EQUIV = ("content-type", "x-ua-compatible")
_LINK_REL = {"stylesheet", "icon", "shortcut", "preload"}


def safe_url(value: str, *, image: bool = False, head: bool = False) -> bool:
    """Whether ``value`` may stay as a URL: relative, a fragment, http(s) or mailto; an image's source may also
    be a base64 ``data:image/png|jpeg|gif|svg+xml`` URI, a head ``<link>`` a ``data:`` stylesheet, font or
    icon. Characters browsers ignore in a URL (spaces, tabs, controls) are ignored here too."""
    v = _URL_NOISE.sub("", value or "")
    if image and _IMAGE_DATA.match(v):
        return True
    if head and _HEAD_DATA.match(v):
        return True
    m = _SCHEME.match(v.lower())
    if m is None:
        return not v.startswith("\\")  # relative, #fragment, //host (a path a browser could read as a scheme: no)
    return m.group(1) in _SAFE_SCHEMES


def _safe_srcset(value: str, image: bool) -> bool:
    return all(safe_url(part.strip().split(" ")[0], image=image) for part in value.split(",") if part.strip())


def _url_ok(tag: str, name: str, value: str, image: bool, head: bool) -> bool:
    """Whether an attribute may keep ``value``: any that is not a URL; a URL by :func:`safe_url` (a script's
    ``src`` is decided when the script is opened)."""
    if not (name in URL_ATTRIBUTES or name.endswith(":href")) or (tag == "script" and name == "src"):
        return True
    return _safe_srcset(value, image) if name == "srcset" else safe_url(value, image=image, head=head)


def _safe_style(value: str) -> bool:
    v = re.sub(r"/\*.*?\*/|\\|\s", "", value or "")
    return not _BAD_STYLE.search(v)


class _Sanitizer(HTMLParser):
    def __init__(self, scripts: bool):
        super().__init__(convert_charrefs=True)
        self.scripts = scripts
        self.out: list[str] = []
        self.drop: list[str] = []       # the dropped element we are inside (and nested ones of its name)
        self.in_body = False
        self.main = 0                   # depth of <main> (the report's content)
        self.foreign = 0                # depth of <svg> and <math>
        self.script: list[str] | None = None
        self.hashes: list[str] = []
        self.data_scripts = False

    # -- attributes ---------------------------------------------------------------------------------------
    def _attrs(self, tag: str, attrs) -> list[tuple[str, str | None]] | None:
        kept, seen = [], set()
        image = tag in ("img", "image", "source", "picture", "input")
        head = tag == "link"
        for name, value in attrs:
            name = (name or "").lower()
            if not _NAME.match(name) or name.startswith("on") or name in ("srcdoc", "formaction", "action") \
                    or name in seen:
                continue
            if value is not None:
                if not _url_ok(tag, name, value, image, head):
                    continue
                if name == "style" and not _safe_style(value):
                    continue
                if tag in ("animate", "set") and name in ("values", "to", "from", "by"):
                    continue
            seen.add(name)
            kept.append((name, value))
        if tag == "meta":
            d = dict(kept)
            equiv = (d.get("http-equiv") or "").lower()
            if self.in_body or (equiv and equiv not in _META_EQUIV):
                return None
        if tag == "link":
            d = dict(kept)
            rel = set((d.get("rel") or "").lower().split())
            if self.in_body or not _HEAD_DATA.match(d.get("href") or "") or not rel or not rel <= _LINK_REL:
                return None
        if tag == "script" and not self._script_allowed(kept):
            return None
        return kept

    def _script_allowed(self, attrs) -> bool:
        return self.scripts and self.main == 0 and self.foreign == 0

    # -- tags -----------------------------------------------------------------------------------------------
    def _start(self, tag: str, attrs, closed: bool) -> None:
        if self.drop:
            if tag == self.drop[-1] and not closed:
                self.drop.append(tag)
            return
        if tag == "body":
            self.in_body = True
        if tag == "script":
            kept = self._attrs(tag, attrs)
            if kept is None:
                if not closed:
                    self.drop.append(tag)
                return
            self._open_script(kept, closed)
            return
        if tag in DROPPED or tag not in ALLOWED:
            if tag in DROPPED and not closed and tag not in _VOID:
                self.drop.append(tag)
            return
        kept = self._attrs(tag, attrs)
        if kept is None:
            return
        if tag == "main" and not closed:
            self.main += 1
        if tag in ("svg", "math") and not closed:
            self.foreign += 1
        self.out.append(self._tag(tag, kept, closed and tag not in _VOID))

    @staticmethod
    def _tag(tag: str, attrs, closed: bool) -> str:
        parts = [tag] + [name if value is None else f'{name}="{_attr(visible(value))}"'
                         for name, value in attrs]
        return "<" + " ".join(parts) + ("/>" if closed else ">")

    def _open_script(self, attrs, closed: bool) -> None:
        src = dict(attrs).get("src")
        if src is not None:
            inline = _data_script(src)
            if inline is not None:  # an embedded script: inline it, so its hash allows it
                attrs = [(n, v) for n, v in attrs if n != "src"]
                self.out.append(self._tag("script", attrs, False))
                self._script_text(inline)
                self.out.append("</script>")
                if not closed:
                    self.drop.append("script")  # its (empty) body and end tag
                return
            if not src.lower().startswith("data:"):
                if not closed:
                    self.drop.append("script")
                return
            self.data_scripts = True
        self.out.append(self._tag("script", attrs, False))
        if closed:
            self.out.append("</script>")
        else:
            self.script = []

    def _script_text(self, text: str) -> None:
        self.out.append(text)
        if text.strip():
            self.hashes.append("'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest())
                               .decode("ascii") + "'")

    def handle_starttag(self, tag, attrs):
        self._start(tag.lower(), attrs, False)

    def handle_startendtag(self, tag, attrs):
        self._start(tag.lower(), attrs, True)

    def handle_endtag(self, tag):
        tag = tag.lower()
        if self.drop:
            if tag == self.drop[-1]:
                self.drop.pop()
            return
        if tag == "script":
            if self.script is not None:
                self._script_text("".join(self.script))
                self.script = None
                self.out.append("</script>")
            return
        if tag in ALLOWED and tag not in _VOID:
            if tag == "main" and self.main:
                self.main -= 1
            if tag in ("svg", "math") and self.foreign:
                self.foreign -= 1
            self.out.append(f"</{tag}>")

    def handle_data(self, data):
        if self.drop:
            return
        if self.script is not None:
            self.script.append(data)
        elif self.cdata_elem == "style":  # no '<': no markup, wherever a browser parses it (in SVG it would)
            self.out.append(data.replace("<", "\\3c "))
        else:
            self.out.append(_html.escape(visible(data), quote=False))

    def handle_decl(self, decl):
        if decl.lower().startswith("doctype"):
            self.out.append(f"<!{decl}>")

    def handle_comment(self, data):  # dropped: nothing in the report needs one
        pass

    def handle_pi(self, data):
        pass

    def unknown_decl(self, data):  # <![CDATA[...]]> in foreign content: its text
        if not self.drop and data.startswith("CDATA["):
            self.out.append(_html.escape(data[6:], quote=False))


def _attr(value: str) -> str:
    """An attribute value inside double quotes."""
    return _html.escape(value, quote=False).replace('"', "&quot;")


def _data_script(src: str) -> str | None:
    """The text of a ``data:`` script that can be inlined (not one whose text closes its element), else None."""
    m = re.match(r"data:(?:text|application)/(?:x-)?(?:java|ecma)script[^,]*?(;base64)?,(.*)$", src, re.I | re.S)
    if m is None:
        return None
    try:
        raw = base64.b64decode(m.group(2), validate=False) if m.group(1) else urllib.parse.unquote_to_bytes(m.group(2))
        text = raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return None if re.search(r"</script|<!--", text, re.I) else text


def csp(script_hashes=(), *, data_scripts: bool = False, quarto: bool = False) -> str:
    """The Content-Security-Policy of a report page: nothing loads or runs but what the page holds itself."""
    parts = ["default-src 'none'", "img-src data:",
             "style-src 'unsafe-inline'" + (" data:" if quarto else "")]
    if quarto:
        parts.append("font-src data:")
    scripts = list(dict.fromkeys(script_hashes)) + (["data:"] if data_scripts else [])
    if scripts:
        parts.append("script-src " + " ".join(scripts))
    parts += ["base-uri 'none'", "form-action 'none'"]
    return "; ".join(parts)


_HEAD = re.compile(r"<head\b[^>]*>", re.I)
_CHARSET = re.compile(r"<meta charset=\"[^\"]*\"/?>", re.I)


def sanitize_page(page: str, *, scripts: bool = False) -> str:
    """``page`` (a whole HTML document) through the allow-list, with its Content-Security-Policy meta at the top
    of the head. ``scripts``: keep the page's own scripts (outside ``<main>``; Quarto's page), else none."""
    s = _Sanitizer(scripts)
    s.feed(page)
    s.close()
    if s.script is not None:  # an unclosed script: dropped
        s.out.append("</script>")
    out = "".join(s.out)
    meta = (f'<meta http-equiv="Content-Security-Policy" content="'
            f'{_attr(csp(s.hashes, data_scripts=s.data_scripts, quarto=scripts))}">')
    m = _CHARSET.search(out[:4096]) or _HEAD.search(out)
    if m is None:
        return meta + out
    return out[:m.end()] + "\n" + meta + out[m.end():]
