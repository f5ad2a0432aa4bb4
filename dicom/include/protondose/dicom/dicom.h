#pragma once
/// \file dicom.h
/// All of protondose's DICOM input and output (the only module that links DCMTK).
#include "protondose/dicom/ct_series.h"
#include "protondose/dicom/inspect.h"
#include "protondose/dicom/ion_plan.h"
#include "protondose/dicom/rt_dose.h"
#include "protondose/dicom/rt_struct.h"
#include "protondose/dicom/spatial_registration.h"
