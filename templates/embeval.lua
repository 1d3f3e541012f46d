--[[
embeval-report pandoc filter (HTML and Typst output).

* Callouts: display.callout() writes "<!-- embeval-callout:KIND -->" followed by a block quote
  whose first paragraph is the bold title. The pair becomes a Div with classes
  "callout callout-KIND"; Divs with such classes (e.g. the failed-chapter box) are typeset as
  #callout(...) in Typst.
* Verdict badges: spans [healthy]{.verdict .verdict-healthy} become #badge(...) in Typst.
* Typst only: internal links (#id) whose target does not exist in the document are unlinked
  (Typst refuses links to missing labels). Ids known to exist elsewhere (other chapters
  converted separately) can be passed as metadata "embeval-ids" (comma separated).
* Links keep their target only with a relative URL, a #fragment or an http, https or mailto
  scheme (a javascript: link in the content is its text).
* Typst only: raw Typst in the report's content (```{=typst} blocks, `...`{=typst} inlines) is
  refused: shown as code, never run. The only Typst code is the renderer's own (the template,
  this filter's callouts and badges, the chapter-break marker the renderer splits on).
]]

-- the renderer's chapter-break marker (embeval_report.report.render.common._CHAPTER_BREAK)
local CHAPTER_BREAK = "// embeval-chapter-break"

local function is_typst(format)
  return format == "typst" or format:match("^typst") ~= nil
end

-- a link keeps its target only with a relative URL, a #fragment or an http(s)/mailto scheme
local SAFE_SCHEMES = { http = true, https = true, mailto = true }

local function safe_link(l)
  local target = l.target:gsub("[%c%s]", ""):lower()
  local scheme = target:match("^(%a[%w+.-]*):")
  if scheme and not SAFE_SCHEMES[scheme] then return l.content end
end

local function refuse_raw_typst(doc)
  return doc:walk({
    RawBlock = function(b)
      if is_typst(b.format) and b.text ~= CHAPTER_BREAK then return pandoc.CodeBlock(b.text) end
    end,
    RawInline = function(r)
      if is_typst(r.format) then return pandoc.Code(r.text) end
    end,
  })
end

local KINDS = { note = true, warning = true, danger = true, success = true }

local function callout_kind(classes)
  for _, c in ipairs(classes) do
    local k = c:match("^callout%-(%a+)$")
    if k and KINDS[k] then return k end
  end
  return nil
end

local function convert_callouts(blocks)
  local out = pandoc.List()
  local i = 1
  while i <= #blocks do
    local b = blocks[i]
    local kind = nil
    if b.t == "RawBlock" and (b.format == "html" or b.format == "markdown") then
      kind = b.text:match("^%s*<!%-%-%s*embeval%-callout:(%a+)%s*%-%->%s*$")
    end
    if kind and KINDS[kind] then
      local nxt = blocks[i + 1]
      if nxt and nxt.t == "BlockQuote" then
        out:insert(pandoc.Div(nxt.content, pandoc.Attr("", { "callout", "callout-" .. kind })))
        i = i + 2
      else
        i = i + 1 -- a lone marker: drop it
      end
    else
      out:insert(b)
      i = i + 1
    end
  end
  return out
end

local function typst_callout(div)
  local kind = callout_kind(div.classes)
  if not kind then return nil end
  local content = pandoc.List(div.content)
  local title = ""
  -- a first paragraph that is all bold is the title
  local first = content[1]
  if first and (first.t == "Para" or first.t == "Plain") and #first.content == 1 and first.content[1].t == "Strong" then
    local t = pandoc.write(pandoc.Pandoc({ pandoc.Plain(first.content[1].content) }), "typst")
    title = ", title: [" .. t:gsub("%s+$", "") .. "]"
    content:remove(1)
  end
  local blocks = pandoc.List()
  blocks:insert(pandoc.RawBlock("typst", '#callout(kind: "' .. kind .. '"' .. title .. ')['))
  blocks:extend(content)
  blocks:insert(pandoc.RawBlock("typst", "]"))
  return blocks
end

local function typst_badge(span)
  if not span.classes:includes("verdict") then return nil end
  local kind = "other"
  for _, c in ipairs(span.classes) do
    local k = c:match("^verdict%-([%w-]+)$")
    if k then kind = k end
  end
  local inl = pandoc.List()
  inl:insert(pandoc.RawInline("typst", '#badge(kind: "' .. kind:gsub('[^%w-]', '') .. '")['))
  inl:extend(span.content)
  inl:insert(pandoc.RawInline("typst", "]"))
  return inl
end

function Pandoc(doc)
  -- 1. callouts (in every block list); no javascript: (or other scheme's) link
  doc = doc:walk({ Blocks = convert_callouts })
  doc = doc:walk({ Link = safe_link })

  if not FORMAT:match("typst") then
    -- HTML: chapters are converted separately; prefix their heading ids (metadata
    -- "embeval-id-prefix") so they are unique in the report, and follow them in links.
    local prefix = doc.meta["embeval-id-prefix"]
    if not prefix then return doc end
    prefix = pandoc.utils.stringify(prefix)
    local heads = {}
    doc = doc:walk({ Header = function(h)
      if h.identifier ~= "" then
        heads[h.identifier] = true
        h.identifier = prefix .. h.identifier
        return h
      end
    end })
    return doc:walk({ Link = function(l)
      local target = l.target:match("^#(.+)$")
      if target and heads[target] then
        l.target = "#" .. prefix .. target
        return l
      end
    end })
  end

  -- 2. no Typst from the content
  doc = refuse_raw_typst(doc)

  -- 3. collect ids
  local ids = {}
  local extra = doc.meta["embeval-ids"]
  if extra then
    for id in pandoc.utils.stringify(extra):gmatch("[^,%s]+") do ids[id] = true end
  end
  local function add(el)
    if el.identifier and el.identifier ~= "" then ids[el.identifier] = true end
  end
  doc:walk({ Header = add, Div = add, Span = add, Table = add, Figure = add, Image = add,
             CodeBlock = add, Code = add, Link = add })

  -- 4. unlink dangling internal links, typeset callouts and badges
  return doc:walk({
    Link = function(l)
      local target = l.target:match("^#(.+)$")
      if target and not ids[target] then return l.content end
      return nil
    end,
    Div = typst_callout,
    Span = typst_badge,
  })
end
