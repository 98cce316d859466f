-- Broken streams, picked by a word in the last user message (for a request that asks
-- for a stream; the events are in the format of the API the request came to):
--   cut         the first such request: the answer's stream is cut after 6 writes (the
--               connection dropped); later ones stream it whole
--   badstream   a stream with an event whose data is not JSON
--   unfinished  a stream that ends cleanly but before its end ([DONE], message_stop)
-- Anything else: a streamed text answer echoing the message.
local cuts = {}

local function has(text, word)
  return text:find("%f[%w]" .. word .. "%f[%W]") ~= nil
end

local function data(v, event)
  return (event and ("event: " .. event .. "\n") or "") .. "data: " .. v .. "\n\n"
end

-- The last text part of the last user message (a turn that failed leaves its message
-- unanswered, so the Messages API merges it with the next one).
local function last_text(req)
  local msgs = type(req.json) == "table" and req.json.messages or {}
  local m = msgs[#msgs]
  if type(m) ~= "table" then return "" end
  if type(m.content) == "string" then return m.content end
  local text = ""
  for _, p in ipairs(type(m.content) == "table" and m.content or {}) do
    if type(p) == "table" and p.type == "text" then text = p.text end
  end
  return text
end

return function(req)
  local text = last_text(req)
  local anthropic = req.api == "anthropic"
  if has(text, "cut") then
    cuts[req.api] = (cuts[req.api] or 0) + 1
    local r = fake.text("an answer that streams whole the second time")
    if cuts[req.api] == 1 then r.cut = 6 end -- (Anthropic: after 3 events before the text, 3 text deltas)
    return r
  elseif has(text, "badstream") then
    if anthropic then
      return { events = { data('{"type":"message_start","message":{"model":"m","usage":{}}}', "message_start"),
                          data("{oops", "content_block_delta") } }
    end
    return { events = { data('{"choices":[{"index":0,"delta":{"content":"ok"}}]}'), data("{oops"), data("[DONE]") } }
  elseif has(text, "unfinished") then
    local r = fake.text("this answer never ends")
    r.truncate = true
    return r
  end
  return fake.text("you said: " .. text)
end
