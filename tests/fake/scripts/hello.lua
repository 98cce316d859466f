-- Always a text answer, in the format of the API the request came to.
return function()
  return fake.text("Hello from the fake model.")
end
