//! What rehearse's parts say to each other (no tokio, no hyper).
