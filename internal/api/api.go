// Package api implements the countersign.v1 gRPC services. RPCs that are not
// built yet answer codes.Unimplemented through the generated Unimplemented
// servers: never a made-up answer.
package api
