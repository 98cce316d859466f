-- Request 1: 429 with retry-after 1; request 2 and later: a text answer.
-- (Request numbers go on across restarts that share a log.)
return function(req)
  if req.n == 1 then
    local r = fake.error(429, "rate limited: try again in 1 s")
    r.headers = { ["retry-after"] = "1" }
    return r
  end
  return fake.text("ok after retry")
end
