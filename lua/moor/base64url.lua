--- base64url without padding (RFC 4648 §5): unguessable names and tokens
-- (harness agents' directories, PKCE verifiers and challenges).
local M = {}

local A = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

function M.encode(bytes)
  local out, bits, n = {}, 0, 0
  for i = 1, #bytes do
    bits = ((bits << 8) | bytes:byte(i)) & 0xffffff
    n = n + 8
    while n >= 6 do
      n = n - 6
      local c = (bits >> n) & 63
      out[#out + 1] = A:sub(c + 1, c + 1)
    end
  end
  if n > 0 then
    local c = (bits << (6 - n)) & 63
    out[#out + 1] = A:sub(c + 1, c + 1)
  end
  return table.concat(out)
end

return M
