--- moor.providers.sse: a Server-Sent Events reader for model replies (the WHATWG
-- event-stream format: lines ending in LF, CRLF or CR; `event:` and `data:` fields,
-- data lines joined with LF; a blank line dispatches; `:` lines are comments).
--
--   local reader = sse.new(function(event, data) ... end)
--   reader:feed(piece)    -- any split of the body, as it arrives
--   reader:close()        -- the body ended: a last event without its blank line is dropped
--   reader.events         -- events dispatched so far
--   reader.raw            -- the first RAW_KEEP bytes of the body, for error messages
local M = {}

local RAW_KEEP = 4096

local Reader = {}
Reader.__index = Reader

function M.new(on_event)
  return setmetatable({ on_event = on_event, buf = "", data = nil, event = nil, events = 0, raw = "",
                        cr = false }, Reader)
end

function Reader:line(line)
  if line == "" then
    if self.data ~= nil then
      self.events = self.events + 1
      local event, data = self.event or "message", self.data
      self.event, self.data = nil, nil
      self.on_event(event, data)
    else
      self.event = nil
    end
    return
  end
  if line:byte(1) == 58 then return end -- ":" a comment (a keep-alive)
  local field, value = line:match("^([^:]*):?(.*)$")
  if value:byte(1) == 32 then value = value:sub(2) end
  if field == "data" then
    self.data = self.data and (self.data .. "\n" .. value) or value
  elseif field == "event" then
    self.event = value
  end
  -- id and retry mean nothing for a model reply
end

function Reader:feed(piece)
  if #self.raw < RAW_KEEP then self.raw = self.raw .. piece:sub(1, RAW_KEEP - #self.raw) end
  if self.cr and piece:byte(1) == 10 then piece = piece:sub(2) end -- the LF of a CRLF split across pieces
  self.cr = false
  local buf = self.buf .. piece
  local pos = 1
  local cr = buf:find("\r", 1, true) -- the next CR (most streams have none: found once)
  while true do
    local s, e = buf:find("\r?\n", pos)
    if cr and cr < pos then cr = buf:find("\r", pos, true) end
    if cr and (not s or cr < s) then s, e = cr, cr end
    if not s then break end
    if e == #buf and buf:byte(e) == 13 then self.cr = true end
    self:line(buf:sub(pos, s - 1))
    pos = e + 1
  end
  self.buf = buf:sub(pos)
end

function Reader:close()
  if self.buf ~= "" then self:line(self.buf) end
  self.buf = ""
end

return M
