--- moor.schema's validator: validate(s, value [, root]) checks a decoded JSON
-- value against a JSON Schema table and answers with one short,
-- path-qualified message an author or a model can act on. Patterns are
-- ECMA-262 regular expressions on PCRE2 (core.regex_compile, host/regex.c),
-- compiled once per pattern string and cached here (check.lua compiles
-- through the same cache).
local core = require "moor.core"
local words = require "moor.schema.words"

local type, pairs, tostring, error, setmetatable = type, pairs, tostring, error, setmetatable
local utf8_len = utf8.len
local concat, sort = table.concat, table.sort
local fmt = string.format
local kind_of, type_is, display, type_list, type_message, deep_equal =
  words.kind_of, words.type_is, words.display, words.type_list, words.type_message, words.deep_equal
local values_message, size_message, bounds_message, format_path =
  words.values_message, words.size_message, words.bounds_message, words.format_path

local M = {}

---------------------------------------------------------------------------
-- Patterns: ECMA-262 regular expressions on PCRE2 (host/regex.c), compiled
-- once per pattern string and cached. Patterns come from schemas, so the set is
-- small; the cap only guards against a caller that generates schemas endlessly.
---------------------------------------------------------------------------

local regex_compile = core.regex_compile
local regex_cache, regex_count = {}, 0

-- compile_regex(pattern) -> compiled | nil, PCRE2's message
local function compile_regex(pattern)
  local re = regex_cache[pattern]
  if re then return re end
  local err
  re, err = regex_compile(pattern)
  if not re then return nil, err end
  if regex_count >= 1000 then regex_cache, regex_count = {}, 0 end
  regex_cache[pattern] = re
  regex_count = regex_count + 1
  return re
end

local function get_regex(pattern)
  local re, err = compile_regex(pattern)
  if not re then
    error(fmt("moor.schema: invalid pattern /%s/: %s", pattern, err), 0)
  end
  return re
end

-- A match that hit PCRE2's limits (host/regex.c) refuses the whole value, even
-- inside anyOf/oneOf where a failed branch could otherwise let it through:
-- validation fails closed. walk() records the pattern here; validate() reads it.
local costly_pattern

local function costly_message(pat)
  return "is too costly to check against the pattern /" .. pat ..
    "/ (it hit the match limit), so it was refused; send a shorter or simpler value"
end

---------------------------------------------------------------------------
-- Validation
---------------------------------------------------------------------------

-- Per-object-schema facts: property names sorted (deterministic first error)
-- and the required set.
local object_info = setmetatable({}, { __mode = "k" })

local function get_object_info(s)
  local info = object_info[s]
  if info then return info end
  local props, req = s.properties, s.required
  local names, req_set, extra_req = {}, {}, {}
  if props then
    for k in pairs(props) do names[#names + 1] = k end
    sort(names)
  end
  if req then
    for i = 1, #req do
      req_set[req[i]] = true
      if not (props and props[req[i]] ~= nil) then extra_req[#extra_req + 1] = req[i] end
    end
  end
  info = { names = names, req = req_set, extra_req = extra_req }
  object_info[s] = info
  return info
end

-- walk(s, v, quiet) returns nil when v is valid. On failure it returns what,
-- path, types: `what` the message without path (true when quiet), `path` the
-- keys innermost first (nil when quiet), `types` the expected type names when
-- the failure is a type mismatch at this very node (lets anyOf merge them).
local walk

local function fail(quiet, what)
  if quiet then return true end
  return what, {}
end

local function fail_at(quiet, what, key)
  if quiet then return true end
  return what, { key }
end

local function same_path(a, b)
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function explain_none(list, v)
  local kind = kind_of(v)
  local types, seen, all_type = {}, {}, true
  local best_w, best_p, best_depth, level = nil, nil, -1, nil
  for i = 1, #list do
    local w, p, ty = walk(list[i], v, false)
    if w then
      if ty then
        for j = 1, #ty do
          if not seen[ty[j]] then seen[ty[j]] = true; types[#types + 1] = ty[j] end
        end
      else
        all_type = false
        local d = #p
        if d > best_depth then
          best_w, best_p, best_depth = w, p, d
          level = { w }
        elseif d == best_depth and same_path(p, best_p) then
          -- several alternatives fail at the same spot: say what each wants
          local dup = false
          for j = 1, #level do if level[j] == w then dup = true end end
          if not dup then level[#level + 1] = w end
        end
      end
    end
  end
  if all_type then
    return type_message(types, v, kind), {}, types
  end
  if #level > 1 then
    return concat(level, "; or "), best_p
  end
  return best_w, best_p
end

local function walk_object(s, v, quiet)
  local props = s.properties
  if props or s.required then
    local info = get_object_info(s)
    local names, req = info.names, info.req
    for i = 1, #names do
      local name = names[i]
      local pv = v[name]
      if pv == nil then
        if req[name] then return fail_at(quiet, "is required", name) end
      else
        local w, p = walk(props[name], pv, quiet)
        if w then
          if p then p[#p + 1] = name end
          return w, p
        end
      end
    end
    local extra = info.extra_req
    for i = 1, #extra do
      if v[extra[i]] == nil then return fail_at(quiet, "is required", extra[i]) end
    end
  end
  local ap = s.additionalProperties
  if ap ~= nil and ap ~= true then
    local bad
    for k, pv in pairs(v) do
      if not (props and props[k] ~= nil) and (ap == false or walk(ap, pv, true)) then
        bad = true
        break
      end
    end
    if bad then
      if quiet then return true end
      -- report the first offending key in sorted order, not pairs order
      local keys = {}
      for k in pairs(v) do
        if not (props and props[k] ~= nil) then keys[#keys + 1] = k end
      end
      sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do
        if ap == false then
          local names = props and get_object_info(s).names or {}
          local what = "is not allowed"
          if #names > 0 then
            local shown = {}
            for i = 1, #names < 10 and #names or 10 do shown[i] = names[i] end
            what = what .. " (allowed: " .. concat(shown, ", ") .. (#names > 10 and ", ..." or "") .. ")"
          end
          return what, { k }
        end
        local w, p = walk(ap, v[k], false)
        if w then
          p[#p + 1] = k
          return w, p
        end
      end
    end
  end
  return nil
end

function walk(s, v, quiet)
  if s == true then return nil end
  if s == false then return fail(quiet, "is not allowed") end
  local kind = kind_of(v)

  local t = s.type
  if t ~= nil then
    local ok
    if type(t) == "string" then
      ok = type_is(t, v, kind)
    else
      ok = false
      for i = 1, #t do
        if type_is(t[i], v, kind) then ok = true; break end
      end
    end
    if not ok then
      if quiet then return true end
      local types = type_list(t)
      return type_message(types, v, kind), {}, types
    end
  end

  local c = s.const
  if c ~= nil and c ~= v and not deep_equal(c, v) then
    return fail(quiet, "must be " .. display(c))
  end

  local en = s.enum
  if en ~= nil then
    local found = false
    for i = 1, #en do
      local e = en[i]
      if e == v or (type(e) == "table" and deep_equal(e, v)) then found = true; break end
    end
    if not found then
      if quiet then return true end
      return values_message(en), {}
    end
  end

  if kind == "string" then
    local lo, hi = s.minLength, s.maxLength
    if lo or hi then
      local n = utf8_len(v)
      if not n then return fail(quiet, "must be valid UTF-8") end
      if (lo and n < lo) or (hi and n > hi) then
        return fail(quiet, size_message("a string", "character", lo, hi))
      end
    end
    local pat = s.pattern
    if pat then
      local r = get_regex(pat):test(v)
      if not r then
        if r == nil then costly_pattern = costly_pattern or pat end
        if quiet then return true end
        if r == nil then return costly_message(pat), {} end
        return "must be a string matching /" .. pat .. "/", {}
      end
    end
  elseif kind == "integer" or kind == "number" then
    local lo, hi, elo, ehi = s.minimum, s.maximum, s.exclusiveMinimum, s.exclusiveMaximum
    if (lo and v < lo) or (hi and v > hi) or (elo and v <= elo) or (ehi and v >= ehi) then
      return fail(quiet, bounds_message(s))
    end
  elseif kind == "array" or kind == "object" or kind == "empty" then
    if kind ~= "object" then
      local n = kind == "empty" and 0 or #v
      local lo, hi = s.minItems, s.maxItems
      if (lo and n < lo) or (hi and n > hi) then
        return fail(quiet, size_message("an array", "item", lo, hi))
      end
      local items = s.items
      if items ~= nil then
        for i = 1, n do
          local w, p = walk(items, v[i], quiet)
          if w then
            if p then p[#p + 1] = i end
            return w, p
          end
        end
      end
    end
    if kind ~= "array" then
      local w, p = walk_object(s, v, quiet)
      if w then return w, p end
    end
  end

  local all = s.allOf
  if all then
    for i = 1, #all do
      local w, p, ty = walk(all[i], v, quiet)
      if w then return w, p, ty end
    end
  end

  local any = s.anyOf
  if any then
    local matched = false
    for i = 1, #any do
      if not walk(any[i], v, true) then matched = true; break end
    end
    if not matched then
      if quiet then return true end
      return explain_none(any, v)
    end
  end

  local one = s.oneOf
  if one then
    local count, first, second = 0, nil, nil
    for i = 1, #one do
      if not walk(one[i], v, true) then
        count = count + 1
        if count == 1 then first = i else second = i; break end
      end
    end
    if count == 0 then
      if quiet then return true end
      return explain_none(one, v)
    end
    if count > 1 then
      return fail(quiet, fmt("must match exactly one oneOf alternative, but matches #%d and #%d",
        first, second))
    end
  end

  return nil
end


--- Validate a decoded JSON value.
-- validate(s, value [, root]) -> true | nil, "<path>: <what>", path
function M.validate(s, value, root)
  if s ~= true and s ~= false and type(s) ~= "table" then
    error("schema.validate: schema must be a table or boolean, got " .. type(s), 2)
  end
  costly_pattern = nil
  local w, p = walk(s, value, false)
  if not w then
    local pat = costly_pattern
    if not pat then return true end
    costly_pattern = nil
    local path = format_path({}, root or "input")
    return nil, path .. ": " .. costly_message(pat), path
  end
  costly_pattern = nil
  local path = format_path(p, root or "input")
  return nil, path .. ": " .. w, path
end

M.compile_regex = compile_regex

return M
