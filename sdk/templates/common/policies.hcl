# The __NAME__ plugin in a router of its own, everything in this folder:
#   router run -config policies.hcl
# Events of type demo.greeting run through the plugin and go to the embedded
# NATS server's subject demo.greeted, which the stream "demo" keeps.

listen  { socket = "./data/router.sock" }
storage { path = "./data/router.db" }

nats "local" {
  embedded = true
  port     = __PORT__ # a free port when `router plugin init` ran
  stream "demo" {
    subjects = ["demo.>"]
  }
}

plugin "__NAME__" {
  wasm   = "./__NAME__.wasm"
  config = { greeting = "hello" }
}

event "demo.greeting" {
  plugins = ["__NAME__"]
  route {
    to      = "nats.local"
    subject = "demo.greeted"
  }
}

event "demo.noise" {
  plugins = ["__NAME__"]
  route {
    to      = "nats.local"
    subject = "demo.noise"
  }
}
