// Package api implements the countersign.v1 gRPC services. RPCs that are not
// built yet answer codes.Unimplemented through the generated Unimplemented
// servers: never a made-up answer.
package api

import (
	countersignv1 "github.com/countersign/countersign/gen/countersign/v1"
)

// OwnerServer implements countersign.v1.OwnerService.
type OwnerServer struct {
	countersignv1.UnimplementedOwnerServiceServer
}

// NewOwnerServer returns the owner service.
func NewOwnerServer() *OwnerServer { return &OwnerServer{} }
