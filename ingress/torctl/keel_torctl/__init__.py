"""keel-torctl: the OpenFlow 1.3 controller of keel's top-of-rack switch."""
